"""Command 1 installs the model packs in the background while the page answers (scripts/launch.sh): converting a pack
waits for that install, saying so, and a failed or vanished install is refused with a message (models.packs)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from playground.errors import PlaygroundError
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
