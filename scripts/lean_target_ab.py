"""The target on the lean forward or on HF's wrapper, in one process, interleaved (issue 43, part 2 for the target).

    flock /tmp/cpu.lock python scripts/lean_target_ab.py [REPS]

For each repeat and each of the benchmark's six prompts: the target alone and the default drafter (the int4 draft,
the confidence policy), each once with the target's cache on the lean forward (kernels/step.py: what the engine
does) and once on HF's DynamicCache (what it did before), the order rotated per repeat. Greedy, 64 new tokens.
Prints each side's median tokens/s per category (wall clock of the decode, the models already loaded and warm),
the speedups over the target alone on the same side, and whether the four outputs are the same tokens.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformers import DynamicCache  # noqa: E402

from playground import engine  # noqa: E402
from playground.bench.prompts import PROMPTS  # noqa: E402
from playground.core.config import DecodeConfig  # noqa: E402
from playground.models import catalog  # noqa: E402
from playground.run.runner import Runner  # noqa: E402
from playground.run.spec import DrafterSpec, PairSpec, RunSpec  # noqa: E402

LEAN = engine.target_cache


def hf_cache(target, positions):
    return DynamicCache(config=target.config)


def decode(runner: Runner, spec: RunSpec, lean: bool) -> tuple[float, list[int]]:
    engine.target_cache = LEAN if lean else hf_cache
    with runner.session(spec) as session:
        start = time.perf_counter()
        tokens = [t for r in session.rounds() for t in r.new_tokens]
        return len(tokens) / (time.perf_counter() - start), tokens


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    pair = catalog.get_pair(catalog.default_pair())
    pairs = PairSpec(pair.name, pair.target, pair.draft)
    runner = Runner()
    config = DecodeConfig(max_new_tokens=64)
    rates: dict[tuple[str, str, bool], list[float]] = {}
    same = True
    warm = RunSpec(pairs, DrafterSpec.of(), config, PROMPTS["code"])
    decode(runner, warm, True), decode(runner, warm.baseline(), False)
    for rep in range(reps):
        for category, prompt in PROMPTS.items():
            spec = RunSpec(pairs, DrafterSpec.of(), config, prompt)
            outputs = []
            for lean in (True, False) if rep % 2 == 0 else (False, True):
                for name, s in (("target alone", spec.baseline()), ("default", spec)):
                    rate, tokens = decode(runner, s, lean)
                    rates.setdefault((category, name, lean), []).append(rate)
                    outputs.append(tokens)
            same &= all(o == outputs[0] for o in outputs)
    engine.target_cache = LEAN
    print("category | target alone lean / HF (tok/s) | default lean / HF | speedup lean / HF")
    for category in PROMPTS:
        m = {
            (n, lean): statistics.median(rates[(category, n, lean)])
            for n in ("target alone", "default")
            for lean in (True, False)
        }
        print(
            f"{category} | {m['target alone', True]:.2f} / {m['target alone', False]:.2f}"
            f" | {m['default', True]:.2f} / {m['default', False]:.2f}"
            f" | {m['default', True] / m['target alone', True]:.2f} / {m['default', False] / m['target alone', False]:.2f}"
        )
    print("every output the same tokens:", same)


if __name__ == "__main__":
    main()
