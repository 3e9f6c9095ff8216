"""The decoding loop's thread count, fitted to the cores other processes leave (playground/engine/threads.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from playground import models
from playground.engine import threads
from playground.core.config import DecodeConfig, DrafterKind, KPolicy
from playground.run.spec import DrafterSpec, PairSpec, RunSpec
from tests.kernel_support import require_kernels


class Clock:
    """time.monotonic and cpu_seconds, as a test sets them."""

    def __init__(self) -> None:
        self.now, self.busy, self.own = 0.0, 0.0, 0.0

    def advance(self, seconds: float, others: float, own: float) -> None:
        """`seconds` pass, in which other processes use `others` cores and this one `own`."""
        self.now += seconds
        self.busy += (others + own) * seconds
        self.own += own * seconds


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(threads, "time", SimpleNamespace(monotonic=lambda: c.now))
    monkeypatch.setattr(threads, "cpu_seconds", lambda: (c.busy, c.own))
    return c


def test_a_busy_core_is_left_to_the_process_that_keeps_it_busy_and_taken_back_when_it_stops(clock):
    before = torch.get_num_threads()
    fit = threads.Fit(cores=2)
    try:
        assert fit() == (2, 0.0) and torch.get_num_threads() == 2  # the first read: no window yet, every core
        clock.advance(threads.WINDOW_S, others=0.7, own=1.3)  # a hog takes a core's share from our two threads
        assert fit()[0] == 1 and torch.get_num_threads() == 1 and fit()[1] == pytest.approx(0.7)
        clock.advance(threads.WINDOW_S / 2, others=1.0, own=1.0)  # within the window: not read again
        assert fit()[0] == 1
        clock.advance(threads.WINDOW_S, others=0.2, own=1.0)  # the hog stopped; a browser uses a little
        assert fit()[0] == 2 and torch.get_num_threads() == 2
        clock.advance(threads.WINDOW_S, others=0.8, own=1.2)
        assert fit()[0] == 1
        fit.release()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_without_proc_every_core_is_used(monkeypatch):
    monkeypatch.setattr(threads, "cpu_seconds", lambda: None)
    fit = threads.Fit(cores=3)
    assert fit() == (3, 0.0) and fit() == (3, 0.0)


def test_a_new_run_starts_its_window_afresh(clock):
    """A run that starts after a hog stopped does not take the hog's time as its own load."""
    before = torch.get_num_threads()
    fit = threads.Fit(cores=2)
    try:
        fit()
        clock.advance(threads.WINDOW_S, others=1.0, own=1.0)
        assert fit() == (1, pytest.approx(1.0))
        clock.advance(5.0, others=1.0, own=0.0)  # between runs: the hog, then it stops
        fit.restart()
        clock.advance(threads.WINDOW_S / 2, others=0.0, own=2.0)
        assert fit() == (2, 0.0)
        clock.advance(threads.WINDOW_S, others=0.0, own=2.0)
        assert fit() == (2, 0.0)
    finally:
        torch.set_num_threads(before)


def test_watching_reads_the_load_and_leaves_the_threads_as_they_are(clock):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    fit = threads.Fit(cores=2)
    try:
        fit.watch()
        clock.advance(threads.WINDOW_S, others=0.9, own=1.1)
        assert fit.watch() == (2, pytest.approx(0.9)) and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_the_real_reading_counts_this_process_within_all(monkeypatch):
    seconds = threads.cpu_seconds()
    if seconds is None:
        pytest.skip("no /proc here")
    every, own = seconds
    assert 0 < own <= every


def test_the_kernels_compute_the_same_bits_on_one_thread_as_on_two(tiny_models):
    """What lets the runner change the thread count between rounds: every kernel computes each element by one
    fixed sequence whatever the threads (a bf16 target's logits, an int8 draft's, one row and many)."""
    require_kernels()
    before = torch.get_num_threads()
    target = models.load_model(str(tiny_models["target"]), precision="bf16")[0]
    draft = models.load_model(str(tiny_models["draft"]), precision="int8")[0]
    draft4 = models.load_model(str(tiny_models["draft"]), precision="int4")[0]
    assert threads.exact_on_any_threads(draft) and hasattr(draft, "_int8_bytes")
    assert threads.exact_on_any_threads(draft4) and hasattr(draft4, "_int4_bytes")
    ids = torch.randint(0, target.config.vocab_size, (1, 37), generator=torch.Generator().manual_seed(0))
    try:
        for model in (target, draft, draft4):
            for rows in (1, 5, 37):
                got = []
                for n in (1, 2):
                    torch.set_num_threads(n)
                    with torch.inference_mode():
                        got.append(model(ids[:, :rows]).logits)
                assert torch.equal(got[0], got[1])
    finally:
        torch.set_num_threads(before)


def test_the_runner_fits_threads_only_where_every_model_runs_the_kernels(runner, tiny_models):
    require_kernels()
    for target, draft, fitted in (
        ("bf16", "int8", True),
        ("bf16", "int4", True),
        ("bf16", "bf16", True),
        ("bf16", "fp32", False),
        ("fp32", "fp32", False),
    ):
        pair = PairSpec("tiny", str(tiny_models["target"]), str(tiny_models["draft"]), target_precision=target)
        drafter = DrafterSpec.of(DrafterKind.DRAFT_MODEL, precision=draft)
        with runner.session(
            RunSpec(pair, drafter, DecodeConfig(max_new_tokens=4, policy=KPolicy.FIXED), "Hi", chat=False)
        ) as session:
            fit = session.decoder().threads
            assert fit == (runner.threads if fitted else runner.threads.watch), (target, draft)
