"""The threads a decode runs on, fitted to the CPU this process gets.

Why: the kernels split every op across OpenMP threads, one a core, each taking a fixed share, and an op ends when
its slowest thread does. When another process keeps a core busy, the thread that shares that core runs only part of
the time and every op waits for it: the draft's many small ops (nine kernel calls a layer) lose far more than the
target's few large ones, and the speedup a comparison shows bends with the load (`python -m playground.bench
--under-load`, docs/benchmarking.md). So before each round the decoding loop asks how much CPU other processes used
over the last WINDOW_S and runs on the cores they leave: every core on an idle machine, one fewer for each core's
worth of their work. The batch-invariant kernels compute every element by the same sequence on any number of
threads, so this changes time, never a bit; the runner fits threads only where they run (Runner._decoder).
"""

from __future__ import annotations

import os
import time

import torch

from playground.core.records import LOADED

WINDOW_S = 0.25  # how often the load is read again: a round or two of the draft, shorter than a segment
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds() -> tuple[float, float] | None:
    """(CPU seconds every process has used, this process's own), from /proc; None where there is no /proc."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        with open("/proc/self/stat") as f:
            own = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    busy = sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)  # all but idle and iowait (steal counts)
    return busy / _TICK, (int(own[11]) + int(own[12])) / _TICK


def exact_on_any_threads(draft: torch.nn.Module | None) -> bool:
    """Whether a draft model (None: none) computes the same bits on any number of threads: it runs the kernels
    (bf16, or int8 / int4 through them). A draft on torch's kernels could then propose otherwise, so its runs keep
    theirs."""
    from playground.kernels import model as kernel_model

    quantised = hasattr(draft, "_int8_bytes") or hasattr(draft, "_int4_bytes")  # kernels.model._quantize's mark
    return draft is None or kernel_model.is_invariant(draft) or quantised


class Fit:
    """Called before each round (SpeculativeDecoder.step): sets the calling thread's torch / OpenMP thread count to
    the cores other processes left free over the last window, and returns (threads, others): the thread count and
    the cores' worth of other processes' work it was fitted to (the round's RoundRecord.threads and .load)."""

    def __init__(self, cores: int | None = None) -> None:
        self.cores = max(1, cores or os.cpu_count() or 1)
        self.threads = self.cores
        self.others = 0.0  # cores' worth of other processes' work in the last window
        self._last: tuple[float, float, float] | None = None

    def __call__(self) -> tuple[int, float]:
        self._read()
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        return self.threads, self.others

    def watch(self) -> tuple[int, float]:
        """The same reading, the thread count left as it is: for a run on torch's kernels, whose bits may depend on
        it. Returns (its threads, others)."""
        self._read()
        return torch.get_num_threads(), self.others

    def restart(self) -> None:
        """A new run starts as on an idle machine, its first window from now: a reading that spans the gap since
        the last run (another run's load, a hog that has stopped since) is not this run's."""
        self.threads, self.others = self.cores, 0.0
        seconds = cpu_seconds()
        self._last = (time.monotonic(), *seconds) if seconds is not None else None

    def _read(self) -> None:
        """Read the load again once a window has passed: others, and the threads that leave them their cores."""
        now = time.monotonic()
        if self._last is None or now - self._last[0] >= WINDOW_S:
            seconds = cpu_seconds()
            if seconds is not None:
                if self._last is not None:
                    t, busy, own = self._last
                    self.others = max(0.0, (seconds[0] - busy) - (seconds[1] - own)) / (now - t)
                    self.threads = max(1, self.cores - int(self.others + 1 - LOADED))
                self._last = (now, *seconds)

    def release(self) -> None:
        """Every core again for what the calling thread runs next (a profile, another job)."""
        if torch.get_num_threads() != self.cores:
            torch.set_num_threads(self.cores)
