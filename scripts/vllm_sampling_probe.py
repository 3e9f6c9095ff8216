"""Reproduce what docs/vllm.md reports about vLLM's CPU build: with speculation at T > 0 its draft tokens are
(almost) never accepted and the text it returns is not the target's (words from other languages, code cut up),
while the same engine's greedy speculation and its target alone at T > 0 are fine.

    python scripts/vllm_sampling_probe.py [--temperature 0.7] [--max-tokens 48] [--k 4]

One vLLM engine per method (target alone, draft model), on the default pair's converted folders (bf16), in vLLM's
own environment (bash scripts/install_vllm.sh), each run greedy and at --temperature on two prompts. It prints
vLLM's own counters (accepted / draft tokens) and the start of each text. No claim is made here about why: the
acceptance rule lives in vLLM (vllm/v1/sample/rejection_sampler.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground import models  # noqa: E402
from playground.bench.prompts import PROMPTS  # noqa: E402
from playground.vllm.engine import VLLMRequest, run_worker  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--categories", nargs="+", default=["code", "story"])
    args = parser.parse_args()
    pair = models.get_pair(models.DEFAULT_PAIR)
    target, draft = models.model_folder(pair.target), models.model_folder(pair.draft)
    prompts = {c: PROMPTS[c] for c in args.categories}
    temperatures = (0.0, args.temperature)
    for method in ("target", "draft_model"):
        request = VLLMRequest(
            target=target,
            method=method,
            draft=draft if method == "draft_model" else None,
            k=args.k,
            max_tokens=args.max_tokens,
            temperatures=temperatures,
            enforce_eager=True,
            in_process=True,
            cpu_threads_bind="0-1",
        )
        run = run_worker(request, prompts)
        print(f"== {run.label} (vLLM {run.vllm_version}, {run.device})")
        for temperature in temperatures:
            counters = run.counters(temperature=temperature)
            accepted = (
                f"accepted {counters.num_accepted_tokens} of {counters.num_draft_tokens} draft tokens"
                if counters.num_draft_tokens
                else "no drafts"
            )
            print(f"  T={temperature}: {accepted}")
            for category in prompts:
                text = run.result(category, temperature).text
                print(f"    {category}: {text[:160]!r}")


if __name__ == "__main__":
    main()
