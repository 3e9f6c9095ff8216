"""The offline pairs for the Qwen2.5-Coder 1.5B target, each with its own drafter, on the code and story
prompts (48 tokens, default precisions and k policy), each against its own target alone, in one process:
python scripts/compare_pairs.py"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from playground import bench, models
from playground.run.runner import Runner
from playground.run.spec import DrafterSpec, PairSpec
from playground.core.config import DecodeConfig
from playground.bench.prompts import PROMPTS

r = Runner()
names = [models.DEFAULT_PAIR] + [n for n, p in models.pairs().items() if p.cross_tokenizer and "1.5B" in n]
prompts = {c: PROMPTS[c] for c in ("code", "story")}
rows = []
for n in names:
    p = models.get_pair(n)
    res = bench.run_grid(
        r, [PairSpec(n, p.target, p.draft)], prompts, [DecodeConfig(max_new_tokens=48)], [DrafterSpec(p.drafter)]
    )
    g = bench.grid_frame(res)
    cols = [
        c
        for c in (
            "category",
            "method",
            "tokens_per_s",
            "speedup",
            "alpha",
            "mean_accepted",
            "c",
            "greedy_equal",
            "near_tie",
        )
        if c in g.columns
    ]
    print(n, flush=True)
    print(g[cols].to_string(), flush=True)
