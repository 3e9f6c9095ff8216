"""python -m playground.bench --under-load: the Run tab's comparison quiet, with a CPU hog started halfway, and the
old way (one after the other), on the tiny pair. Its speeds are reported, never asserted: this checks the plumbing
(each comparison's figures, the hogs started and always stopped)."""

from __future__ import annotations

import math

from playground.bench import load
from playground.core.progress import quiet


def test_the_hogs_start_once_and_always_stop():
    with load.Hogs(2) as hogs:
        hogs.start()
        first = list(hogs.procs)
        hogs.start()  # a second call starts nothing more
        assert hogs.procs == first and all(p.poll() is None for p in first)
    assert hogs.procs == [] and all(p.poll() is not None for p in first)


def test_under_load_reports_each_way_of_comparing(runner, tiny_spec, monkeypatch):
    started = []
    real_start = load.Hogs.start
    monkeypatch.setattr(load.Hogs, "start", lambda self: started.append(1) or real_start(self))
    rows = load.run_under_load(runner, tiny_spec(max_new_tokens=24, k=3), 1, 1, quiet)
    assert [r["comparison"] for r in rows] == [load.QUIET, load.HOG, load.SEQUENTIAL]
    assert started  # halfway through the hog comparisons
    quiet_row, hog_row, sequential = rows
    assert quiet_row["vs_quiet"] == 1.0 and all(r["speedup"] > 0 for r in rows)
    assert math.isnan(sequential["segment_min"])  # one after the other: no segments to spread
    assert not math.isnan(hog_row["segment_min"]) and len(hog_row["each"]) == 1
