"""The packs' conversion runs in a child process (playground/models/convert.py): its failure reaches the parent
as a message, and it ends when the app that started it ends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from playground.core.errors import PlaygroundError
from playground.models import convert

ROOT = Path(__file__).resolve().parents[1]


def test_a_failed_conversion_says_why_in_the_parent(tmp_path):
    foreign = tmp_path / "foreign.gguf"
    foreign.write_bytes(b"not a gguf file at all")
    with pytest.raises(PlaygroundError, match="not a GGUF file"):
        convert.in_child(foreign, tmp_path / "out", "bfloat16")
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's prctl")
def test_the_conversion_ends_when_the_app_that_started_it_ends(tmp_path):
    """A parent process starts a child that asks for the signal, then the parent is killed: the child must go."""
    pid_file = tmp_path / "child.pid"
    child = (
        "import os, sys, time; from playground.models.convert import _end_with; "
        f"_end_with(int(sys.argv[1])); open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    )
    parent = (
        "import os, subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {child!r}, str(os.getpid())]); time.sleep(60)"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    app = subprocess.Popen([sys.executable, "-c", parent], env=env)
    try:
        deadline = time.monotonic() + 30
        while not pid_file.is_file() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.1)
        grandchild = int(pid_file.read_text())
        os.kill(grandchild, 0)  # alive while the parent is
        app.kill()
        app.wait()
        deadline = time.monotonic() + 10
        while _alive(grandchild):
            assert time.monotonic() < deadline, "the child outlived the parent"
            time.sleep(0.1)
    finally:
        app.kill()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (ended, not yet reaped by init) counts as gone
    status = Path(f"/proc/{pid}/status")
    return status.is_file() and "State:\tZ" not in status.read_text()
