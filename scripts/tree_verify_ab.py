"""A token tree's verification on the lean forward against a chain's, interleaved in one process (issue 54).

    flock -x /tmp/cpu.lock python scripts/tree_verify_ab.py [REPS]

The default pair's target as the app loads it (the lean forward where it runs on the kernels), on top of a cache of
128 positions: per repeat, in rotated order, the chain's verification of 8 drafts (9 rows: V(9), one C call), a
16-node tree's (17 rows: the root and 16 nodes, four branches of 4 nodes with its mask and rotary positions, one C
call: LeanForward.tree) and a chain of 17 rows (V(17)). Prints each one's median milliseconds and the tree's over V(9).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from playground.core.config import DecodeConfig  # noqa: E402
from playground.core.draft import Tree  # noqa: E402
from playground.decoding.tree import score_tree  # noqa: E402
from playground.engine.cache import crop_cache  # noqa: E402
from playground.kernels.step import LeanForward, score, target_cache  # noqa: E402
from playground.models import catalog  # noqa: E402
from playground.run.runner import Runner  # noqa: E402
from playground.run.spec import DrafterSpec, PairSpec, RunSpec  # noqa: E402

CONTEXT = 128


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    pair = catalog.get_pair(catalog.default_pair())
    spec = RunSpec(PairSpec(pair.name, pair.target, pair.draft), DrafterSpec.of(), DecodeConfig(max_new_tokens=8), "x")
    with Runner().session(spec, warm=False) as session:
        measure(session.load().target, reps)


def measure(target, reps: int) -> None:
    cache = target_cache(target, CONTEXT + 40)
    assert isinstance(cache, LeanForward), "the target does not run on the lean forward here"
    g = torch.Generator().manual_seed(0)
    vocab = target.config.vocab_size
    ids = torch.randint(0, vocab, (1, CONTEXT + 1), generator=g)
    score(target, ids[:, :-1], cache, 1)
    parents = [-1] * 4 + list(range(4)) + [4 + i for i in range(4)] + [8 + i for i in range(4)]
    depths = [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4
    tree = Tree(torch.randint(0, vocab, (16,), generator=g).tolist(), parents, depths, torch.zeros(1), 0)
    chain9 = torch.randint(0, vocab, (1, 9), generator=g)
    chain17 = torch.randint(0, vocab, (1, 17), generator=g)
    passes = {
        "chain, 9 rows (V(9))": lambda: score(target, chain9, cache, 9),
        "tree of 16 nodes, 17 rows": lambda: score_tree(target, cache, ids, CONTEXT, tree),
        "chain, 17 rows (V(17))": lambda: score(target, chain17, cache, 17),
    }
    times: dict[str, list[float]] = {name: [] for name in passes}
    names = list(passes)
    with torch.inference_mode():
        for rep in range(reps + 1):
            for name in names[rep % 3 :] + names[: rep % 3]:
                start = time.perf_counter()
                passes[name]()
                if rep:  # the first round warms each shape
                    times[name].append(time.perf_counter() - start)
                crop_cache(cache, CONTEXT)
    ms = {name: 1000 * statistics.median(t) for name, t in times.items()}
    for name, value in ms.items():
        print(f"{name:28s} {value:8.1f} ms (median of {reps})")
    print(f"tree of 16 / V(9): {ms[names[1]] / ms[names[0]]:.3f}")


if __name__ == "__main__":
    main()
