"""How long the sessions' budget takes to count a session, and how far its count is from what the session really
holds (docs/memory.md). On the tiny pairs (built under a temporary folder), two sessions:

- suffix-20k: suffix decoding's memory of 40 earlier runs, 20,000 tokens, and a step-through of the suffix drafter
  that drafts from it (24 rounds);
- session: a Run tab run of 256 tokens compared with the target alone (its trace, its download files) and a
  step-through of the draft model (24 rounds).

Real size: what Python frees when the session is closed and its latest run dropped (tracemalloc runs while it is
built, after the same session was built once to warm every cache up), its tensors (each storage once, found by
walking it) and its download files. The count: what the ledger holds for the session after charge(), less the fixed SESSION_BYTES;
its time: the median of 5 charges. Runs on any commit that has ui/budget.py (before and after issue 55).

    python scripts/budget_count.py
"""

from __future__ import annotations

import gc
import os
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from playground.models import tiny  # noqa: E402


def text_tokens(n: int, seed: int = 0) -> list[int]:
    """A token stream with text's habits: Zipfian words, phrases that come back."""
    rng = random.Random(seed)
    vocab = [rng.randrange(150_000) for _ in range(3000)]
    weights = [1 / (i + 1) for i in range(3000)]
    phrases = [rng.choices(vocab, weights, k=rng.randint(3, 20)) for _ in range(400)]
    out: list[int] = []
    while len(out) < n:
        out += rng.choice(phrases) if rng.random() < 0.5 else rng.choices(vocab, weights, k=rng.randint(3, 12))
    return out[:n]


def tensor_bytes(*roots: object) -> int:
    """Bytes of the distinct tensor storages the roots reach, past the shared models, tokenizers and pairs."""
    import ctypes

    import torch
    from transformers import PreTrainedTokenizerBase

    from playground.models import LoadedPair

    skip = (torch.nn.Module, PreTrainedTokenizerBase, LoadedPair, type, type(sys), ctypes.Structure, ctypes.Array)
    seen, storages, stack, total = set(), set(), list(roots), 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip) or obj is None or type(obj).__name__ == "Proj":
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            if storage.data_ptr() not in storages:
                storages.add(storage.data_ptr())
                total += storage.nbytes()
        elif isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif not isinstance(obj, (str, bytes, int, float, complex)):
            stack.extend(vars(obj).values() if hasattr(obj, "__dict__") else ())
    return total


def build(runner, scenario: str):
    from playground.core.config import DEFAULT_CONFIDENCE, DrafterKind, KPolicy
    from playground.ui import budget, run_tab
    from playground.ui.common import Controls
    from playground.ui.state import SessionState
    from playground.ui.step_tab import step_next, step_start

    state = SessionState(ledger=budget.Ledger(limit_mb=1e6))
    common = dict(
        pair="tiny (test)",
        draft_id="",
        target_id="",
        target_precision="default",
        invariant=True,
        draft_precision="default",
        tree="",
        policy=KPolicy.FIXED.label,
        confidence=DEFAULT_CONFIDENCE,
        temperature=0.0,
        top_p=1.0,
        seed=0,
        prompt="Once upon a time",
        k=4,
    )  # the page's start, as tests/ui/ui_support.py
    if scenario == "suffix-20k":
        tokens, memory = text_tokens(20_000), state.kept(DrafterKind.SUFFIX)
        for i in range(40):
            memory.add(memory.begin(), tokens[i * 500 : (i + 1) * 500])
        start = Controls.named(drafter="suffix decoding", suffix_memory=True, max_new_tokens=200, **common)
    else:
        run = Controls.named(drafter="draft model", max_new_tokens=256, **common)
        for _ in run_tab.generate(runner, state, run, True):
            pass
        start = Controls.named(drafter="draft model", max_new_tokens=200, **common)
    status, _, _ = step_start(runner, state, start)
    assert state.step is not None and (state.run is not None or scenario != "session"), status
    for _ in range(24):
        step_next(state)
    return state


def measure(runner, scenario: str) -> dict:
    from playground.ui import budget

    build(runner, scenario)  # warm: models, kernels, caches of every kind
    gc.collect()
    tracemalloc.start()
    state = build(runner, scenario)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        state.ledger.charge(state)
        times.append(time.perf_counter() - t0)
    count = state.ledger.total() - budget.SESSION_BYTES
    files = state.downloads.nbytes()
    junk = [tuple(range(n)) for n in range(1, 20) for _ in range(2_100)]  # CPython's tuple free lists, filled
    del junk
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    tensors = tensor_bytes(state)
    state.close()  # what dropping everything the session keeps frees (tests/ui/test_budget_kept.py measures so)
    state.run = None
    gc.collect()
    python = before - tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    real = python + tensors + files
    return dict(real=real, count=count, ms=1e3 * statistics.median(times), python=python, files=files)


def main() -> None:
    import torch

    from playground.run.runner import Runner

    torch.set_num_threads(2)
    root = Path(tempfile.mkdtemp(prefix="budget-count-"))
    os.environ["PLAYGROUND_PAIRS_FILE"] = str(tiny.write_pairs_file(root))
    os.environ["PLAYGROUND_MODEL_ROOTS"] = str(root)
    os.environ["PLAYGROUND_DEFAULT_PAIR"] = "tiny (test)"
    runner = Runner()
    print(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    for scenario in ("suffix-20k", "session"):
        m = measure(runner, scenario)
        error = m["count"] / m["real"] - 1
        print(
            f"{scenario}: real {m['real'] / 1e6:.1f} MB (Python {m['python'] / 1e6:.1f} MB, files "
            f"{m['files'] / 1e3:.0f} kB), counted {m['count'] / 1e6:.1f} MB ({error:+.1%}), a count {m['ms']:.1f} ms"
        )


if __name__ == "__main__":
    main()
