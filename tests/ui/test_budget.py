"""One memory budget in bytes for everything sessions keep, all sessions together (issue 44; playground.ui.budget):
over PLAYGROUND_SESSION_MB the least recently used thing goes first, whoever holds it, and that session's next
status line says so. On real SessionStates, suffix memories, recorded runs and upload files; each test's ledger is
its own (the process's LEDGER is the app's)."""

from __future__ import annotations

import gc
import random
import time
import tracemalloc

import torch

from playground.env import settings
from playground.core.config import DrafterKind
from playground.decoding.suffix import SuffixMemory
from playground.ui import budget, recorded_runs, run_tab, theory_tab
from playground.ui.state import CurrentRun, SessionState
from playground.ui.uploads import Uploads
from ui_support import controls

MB = budget.MB


def _memory(runs: int, tokens: int = 1024, seed: int = 0) -> SuffixMemory:
    rng = random.Random(seed)
    memory = SuffixMemory()
    for _ in range(runs):
        memory.add(memory.begin(), [rng.randrange(150_000) for _ in range(tokens)])
    return memory


def _with_memory(ledger: budget.Ledger, runs: int, seed: int) -> SessionState:
    """A session whose suffix memory holds `runs` runs, counted in `ledger`."""
    state = SessionState(ledger=ledger)
    state.kept(DrafterKind.SUFFIX).__dict__.update(_memory(runs, seed=seed).__dict__)
    state.charge()
    return state


def test_the_suffix_memory_counts_about_what_it_takes():
    """Issue 44: 64 runs of 1,024 tokens took 416 MB of one session. The budget counts a memory by its nodes
    (no walk of the heap); measured with tracemalloc, the count is within 15 % of what Python allocated."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        memory = _memory(8)
        gc.collect()
        taken = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 0.85 * taken < memory.nbytes() < 1.15 * taken, (memory.nbytes(), taken)


def test_over_the_budget_the_least_recently_used_goes_first_and_its_session_is_told():
    ledger = budget.Ledger(limit_mb=1_000)  # room for both while they fill
    old = _with_memory(ledger, 4, seed=1)
    time.sleep(0.01)
    new = _with_memory(ledger, 4, seed=2)
    size = old.kept(DrafterKind.SUFFIX).nbytes()
    new.charge()  # `old` was used again by kept() above: `new` is now the least recently used
    ledger._limit_mb = (ledger.total() - size / 2) / MB  # one memory must go

    dropped = ledger.charge()
    assert [d.what for d in dropped] == ["suffix decoding's memory of your earlier runs (4 runs)"]
    assert ledger.total() <= ledger.limit_bytes
    assert DrafterKind.SUFFIX in old._kept and DrafterKind.SUFFIX not in new._kept
    news = new.news()
    assert "suffix decoding's memory of your earlier runs (4 runs)" in news and "PLAYGROUND_SESSION_MB" in news
    assert new.news() == "" and old.news() == ""  # said once, and only to the session that lost it
    assert len(new.kept(DrafterKind.SUFFIX).tree.seqs) == 0  # a fresh memory if it drafts from one again


def test_the_budget_covers_all_sessions_together_and_a_closed_session_counts_no_more():
    ledger = budget.Ledger(limit_mb=10_000)
    states = [_with_memory(ledger, 2, seed=i) for i in range(3)]
    sizes = [s.kept(DrafterKind.SUFFIX).nbytes() for s in states]
    assert ledger.total() == sum(sizes) + 3 * budget.SESSION_BYTES
    states[0].close()
    assert ledger.total() == sum(sizes[1:]) + 2 * budget.SESSION_BYTES


def test_a_run_still_streaming_is_never_dropped():
    ledger = budget.Ledger(limit_mb=0.001)
    state = SessionState(ledger=ledger)
    state.run = CurrentRun(spec=None)  # type: ignore[arg-type]  streaming: neither finished nor stopped
    state.charge("run")
    assert state.run is not None and state.news() == ""
    state.run.finished = True
    state.charge("run")
    assert state.run is None and "your latest run's trace" in state.news()


def test_a_recorded_run_dropped_for_the_budget_is_said_in_the_next_status_line():
    """Two sessions open a gallery run each (no model); the budget holds one: the older one's trace goes, and the
    next status line of that session says what went and why."""
    data = recorded_runs.read_bounded(recorded_runs.RUNS / "code.json")
    ledger = budget.Ledger(limit_mb=10_000)
    first, second = SessionState(ledger=ledger), SessionState(ledger=ledger)
    recorded_runs.open_run(data, first, "gallery: code")
    one = ledger.total()
    ledger._limit_mb = one * 1.5 / MB
    view, _, _ = recorded_runs.open_run(data, second, "gallery: code")
    assert first.run is None and second.run is not None
    assert "dropped" not in view.status  # nothing of this session went
    view, _, _ = recorded_runs.open_run(data, first, "gallery: code")
    assert "your latest run&#x27;s trace" in view.status and "PLAYGROUND_SESSION_MB" in view.status


def test_uploads_count_in_the_budget_and_a_removed_one_is_refused_saying_why(tmp_path):
    ledger = budget.Ledger(limit_mb=10_000)
    record = Uploads()
    paths = []
    for i in range(3):
        path = tmp_path / f"u{i}" / "trace.json"
        path.parent.mkdir()
        path.write_bytes(b"x" * 300_000)
        paths.append(str(path))
        record.add("10.0.0.1", [str(path)], "10.0.0.1 ")
    ledger.charge(record)
    assert ledger.total() == 900_000
    ledger._limit_mb = 0.7
    dropped = ledger.charge()
    assert len(dropped) == 1 and ledger.total() == 600_000
    gone = [p for p in paths if not (tmp_path / p).exists()]
    assert len(gone) == 1 and record.dropped


def test_the_run_tabs_memory_line_says_what_the_session_keeps_and_the_budget(tiny_catalog, runner):
    ledger = budget.Ledger(limit_mb=512)
    state = SessionState(ledger=ledger)
    final = list(run_tab.generate(runner, state, controls(max_new_tokens=16), False))[-1]
    line = final.summary.rsplit("\n\n", 1)[-1]
    run_bytes = state.run.nbytes()
    assert line.startswith("Memory this session keeps on the server: ")
    assert f"latest run's trace {budget.size(run_bytes)}" in line and "download files" in line
    assert f"All sessions together: {budget.size(ledger.total())} of the 512 MB budget" in line


def test_the_budget_is_the_setting_and_the_theory_tab_states_it(monkeypatch):
    monkeypatch.delenv("PLAYGROUND_SESSION_MB", raising=False)
    assert settings.read().session_mb == 1024 and budget.Ledger().limit_bytes == 1024 * MB
    assert "1,024 MB" in theory_tab.budget_line() and "PLAYGROUND_SESSION_MB" in theory_tab.budget_line()
    monkeypatch.setenv("PLAYGROUND_SESSION_MB", "256")
    assert budget.Ledger().limit_bytes == 256 * MB and "256 MB" in theory_tab.budget_line()
