"""The draft's prompt window against the whole prompt over a whole run (issue 53, item 5): the default configuration
on the bench's long prompts, NEW tokens, greedy, the draft reading the prompt's head and tail (decoding/model.py's
WINDOW) or the whole prompt, and the target alone; rotated, REPS each.

    python scripts/draft_window.py [--lengths 800 2000] [--new 64] [--reps 2] [--windows 64,448 256,256]

Prints per length and engine the median first round and whole run (seconds), the tokens kept per round, the draft's
share of the first round, the speedup over the target alone, and whether every output is the target alone's. The first
round alone, with HF and stock transformers beside it: `python -m playground.bench --ttft 2000 --ttft-draft-ab`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground import models
from playground.bench.cli import pair_specs
from playground.bench.ttft import prompt_of
from playground.core.config import DecodeConfig
from playground.decoding import model as draft_model
from playground.engine import clock
from playground.run.runner import Runner
from playground.run.spec import DrafterSpec, RunSpec

ALONE, WHOLE = "target alone", "speculative, whole prompt"


def one_run(session, spec: RunSpec, head_tail: tuple[int, int] | None) -> dict:
    with draft_model.window(head_tail):
        decoder = session.decoder(spec)
        device = session.pair.target.device
        start = clock(device)
        rounds = []
        for record in decoder:
            rounds.append((record, clock(device) - start))
    first, draft_s = rounds[0][1], rounds[0][0].draft_s
    return {
        "first": first,
        "total": rounds[-1][1],
        "per_round": sum(len(r.new_tokens) for r, _ in rounds) / len(rounds),
        "share": draft_s / first,
        "tokens": list(decoder.new_tokens),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[800, 2000])
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--windows", nargs="*", default=[], help="(head, tail) pairs as H,T (default: WINDOW's)")
    args = parser.parse_args()
    windows = [tuple(map(int, w.split(","))) for w in args.windows] or [draft_model.WINDOW]
    engines = {ALONE: None, WHOLE: None} | {f"speculative, window {h}+{t}": (h, t) for h, t in windows}
    names = list(engines)
    pair_spec = pair_specs([models.default_pair()], None)[0]
    alone, default = DrafterSpec.target_alone(), DrafterSpec()
    print(f"pair {pair_spec.target} / {pair_spec.draft}", flush=True)
    with Runner().session(RunSpec(pair_spec, default, prompt="x")) as session:
        pair = session.ready().pair
        prompts = {n: prompt_of(pair.tokenizer, n) for n in args.lengths}
        runs = {(e, n): [] for e in names for n in args.lengths}
        for rep in range(args.reps):
            for n in args.lengths:
                for i in range(len(names)):
                    engine = names[(i + rep) % len(names)]
                    drafter = alone if engine == ALONE else default
                    spec = RunSpec(pair_spec, drafter, DecodeConfig(max_new_tokens=args.new), prompts[n][0])
                    runs[(engine, n)].append(one_run(session, spec, engines[engine]))
                    print(f"rep {rep + 1} {n} tokens {engine}: {runs[(engine, n)][-1]['total']:.2f} s", flush=True)
    print(
        "\n| prompt | engine | first round s | whole run s | tokens a round | draft share | x target alone | same output |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n in args.lengths:
        reference = runs[(ALONE, n)][0]["tokens"]
        alone_total = statistics.median(r["total"] for r in runs[(ALONE, n)])
        for engine in names:
            rs = runs[(engine, n)]
            med = {key: statistics.median(r[key] for r in rs) for key in ("first", "total", "per_round", "share")}
            share = f"{med['share']:.0%}" if engine != ALONE else "–"
            same = all(r["tokens"] == reference for r in rs)
            print(
                f"| {len(prompts[n][1])} | {engine} | {med['first']:.2f} | {med['total']:.2f} | {med['per_round']:.2f} "
                f"| {share} | {alone_total / med['total']:.2f} | {same} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
