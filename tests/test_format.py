"""The code is formatted by ruff format (ruff.toml: 120 columns), so the style is the formatter's, not a review's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_python_file_is_formatted():
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (
        f"run `ruff format` (requirements-dev.txt pins it):\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
    )
