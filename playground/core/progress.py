"""How long work reports how far it is: a Progress is called with (message, fraction done in [0, 1]).

quiet says nothing; printer() writes one line per new message (the terminal's progress, for the model packs
and the benchmark); the UI passes a gr.Progress through ui.common.gradio_progress."""

from __future__ import annotations

import sys
from typing import Callable, TextIO

Progress = Callable[[str, float], None]


def quiet(message: str, fraction: float) -> None:
    """A Progress that reports nothing."""


def printer(stream: TextIO | None = None) -> Progress:
    """A Progress that prints "[ 40%] message" to `stream` (stdout when None, as it is when called), one line
    per message change."""
    last: list[str] = []

    def report(message: str, fraction: float) -> None:
        if last != [message]:
            print(f"[{fraction:4.0%}] {message}", file=stream or sys.stdout, flush=True)
            last[:] = [message]

    return report
