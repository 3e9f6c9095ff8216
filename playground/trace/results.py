"""What the benchmark measures, as data: one run's row (Result: ours, an HF `generate` configuration or a vLLM run),
the HF configurations' names, and the table the UI and the report read (grid_frame). Pure of the engine, and below
bench/ and vllm/ both: bench/grid.py runs the grid, bench/hf.py and vllm/peer.py add their peers' rows,
bench/report.py, vllm/report.py and the views read the frame."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Sequence

import pandas as pd


HF_TARGET_ALONE = "hf target alone"
HF_SAME_DRAFT = "hf assisted (same draft)"
HF_CONFIDENCE = "hf assisted (same draft, confidence)"
HF_DEFAULTS = "hf assisted (HF defaults)"
HF_PROMPT_LOOKUP = "hf prompt lookup"
HF_UNIVERSAL = "hf universal assisted (same draft)"
HF_METHODS = (HF_TARGET_ALONE, HF_SAME_DRAFT, HF_CONFIDENCE, HF_DEFAULTS, HF_PROMPT_LOOKUP, HF_UNIVERSAL)
HF_SPECULATIVE = HF_METHODS[1:]  # what vs_best_hf compares against
HF_ASSISTED = (HF_SAME_DRAFT, HF_CONFIDENCE, HF_DEFAULTS, HF_UNIVERSAL)  # those that run the pair's draft model

nan = float("nan")


@dataclass
class Result:
    """One run: ours (a drafter, or the target alone) or an HF `generate` configuration."""

    pair: str
    category: str
    method: str  # our drafter's label ("draft model (int8)", "target alone", ...), one of HF_METHODS, a vLLM label
    drafter: str  # the drafter kind (spec.DrafterKind value); HF and vLLM rows: the kind of ours they correspond to
    engine: str  # "ours", "hf" or "vllm" (vllm.peer)
    k: str  # "4", "heuristic", "theory"; HF: num_assistant_tokens, "heuristic", "hf default"; "" for the baselines
    temperature: float
    target_precision: str
    draft_precision: str  # "" without a draft model; early exit: the target's (it drafts with the target's layers)
    tokens: int
    seconds: float  # ours: engine time (trace.summarize's wall_s); HF: wall_s
    tokens_per_s: float  # tokens / seconds
    wall_s: float = nan  # perf_counter around the whole call (tokenising included), both engines
    kernels: str = (
        ""  # the target's: "batch-invariant" (greedy output must equal the target alone's, exactly) or "stock"
    )
    speedup: float = nan  # over the same engine's target alone (same prompt, target, precision, sampling)
    alpha: float = nan
    alpha_eval: float = nan
    mean_accepted: float = nan
    c: float = nan  # draft seconds per drafted token / one target step
    v: float = nan  # verify seconds per round / one target step
    theory_speedup: float = nan  # Leviathan's ideal for the measured alpha_eval and c (v = 1)
    calibrated_speedup: float = nan  # the same with this machine's measured v(k)
    greedy_equal: bool | None = None  # temperature 0: output == our target alone's output
    near_tie: bool | None = None  # greedy and different: whether the first difference is a near-tie
    diff_position: int | None = None  # the first differing output position
    gap_spec: float = nan  # top-1 minus top-2 logit there, in this run (nan when not recorded)
    gap_base: float = nan  # ... and in the target alone's run
    tree: str = ""  # ours: the token tree's shape ("3-2-1-1", "dynamic:12"); "" for a chain
    nodes: float = nan  # ours: draft tokens scored per target pass, the mean k of the draft rounds (a tree's nodes)
    depth_acceptance: list[float] = field(default_factory=list)  # ours: trace.depth_acceptance (not in the frame)
    new_tokens: list[int] = field(default_factory=list)
    # vLLM's spec-decode counters under its names (SpecCounters.as_dict; ours from trace.vllm_metrics)
    counters: dict = field(default_factory=dict)
    margins: list[float] = field(default_factory=list)  # our target alone: the top-1 minus top-2 logit per token
    target_nll: float = nan  # sampled rows: the target's mean NLL per token of this output at T (bench.likelihood)
    off_distribution: bool | None = None  # ... more than NLL_MARGIN above the target alone's

    @property
    def wall_tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else nan


def median_of_runs(runs: Sequence[Sequence[Result]]) -> list[Result]:
    """Repeats of one grid (rows in the same order) as one list: per row, the repeat whose speedup is the median (the
    lower one of an even count; a target alone's row: by tokens/s), so every field of a row is from one repeat and
    its speedup stays paired with the target alone it ran beside. Repeats holding other rows are refused."""
    keys = [
        [(r.pair, r.category, r.method, r.engine, r.k, r.temperature, r.draft_precision, r.tree) for r in run]
        for run in runs
    ]
    if not runs or any(k != keys[0] for k in keys):
        raise ValueError("the repeats of a grid must hold the same rows in the same order")
    order = lambda r: (r.speedup if not math.isnan(r.speedup) else -math.inf, r.tokens_per_s)
    return [sorted(rows, key=order)[(len(rows) - 1) // 2] for rows in zip(*runs)]


# ---------------------------------------------------------------- the table the UI and the report read

LISTS = ("depth_acceptance", "new_tokens", "counters", "margins")  # Result fields kept out of the frame


def vs_best_hf(results: Sequence[Result]) -> list[float]:
    """Per row of ours: its wall-clock tokens/s over the best HF speculative configuration's (HF_SPECULATIVE)
    on the same pair, target precision, prompt and temperature; nan for HF rows and where none ran.
    Wall clock on both sides: HF's generate has no engine-time split like ours."""
    best: dict[tuple, float] = {}
    for r in results:
        if r.engine == "hf" and r.method in HF_SPECULATIVE and not math.isnan(r.wall_tokens_per_s):
            key = (r.pair, r.target_precision, r.category, r.temperature)
            best[key] = max(best.get(key, 0.0), r.wall_tokens_per_s)
    out = []
    for r in results:
        top = best.get((r.pair, r.target_precision, r.category, r.temperature))
        out.append(r.wall_tokens_per_s / top if r.engine == "ours" and top else nan)
    return out


FRAME_COLUMNS = [f for f in Result.__dataclass_fields__ if f not in LISTS] + [
    "wall_tokens_per_s",
    "vs_best_hf",
    "calibrated_error",
    "greedy_ok",
    "mean_acceptance_length",
]


# The tables of runs, from one list: each column once, in the order every table reads them, with the tables that show
# it. "cli": the benchmark's stdout (bench/cli.py); "runs": the report's table of runs; "group", "geomean", "mean":
# the report's summary (grouped by these, geometric and plain means over the categories); "tab": the Sweep and
# Compare tabs' table; "precision", "precision_cli": the precision challenge's frame and its stdout table. Each is a
# column of grid_frame (a Result field or one it derives) or "greedy" (report.runs_frame's cell): test_results.py.
SHOWN = (
    ("pair", "cli runs group tab"),
    ("category", "cli runs tab"),
    ("engine", "tab"),
    ("method", "cli runs group tab precision precision_cli"),
    ("k", "cli runs group tab"),
    ("tree", "runs"),
    ("temperature", "cli runs group tab"),
    ("target_precision", "cli runs group tab precision precision_cli"),
    ("draft_precision", "cli runs group tab precision precision_cli"),
    ("tokens", "cli runs tab precision precision_cli"),
    ("tokens_per_s", "cli runs geomean tab precision precision_cli"),
    ("speedup", "cli runs geomean tab precision precision_cli"),
    ("vs_best_hf", "cli runs geomean"),
    ("alpha", "cli runs mean tab precision precision_cli"),
    ("nodes", "cli runs mean"),
    ("mean_accepted", "cli runs mean tab precision"),
    ("mean_acceptance_length", "tab"),
    ("c", "cli runs mean tab precision precision_cli"),
    ("v", "cli runs mean tab precision precision_cli"),
    ("theory_speedup", "runs geomean tab precision"),
    ("calibrated_speedup", "cli runs geomean tab precision precision_cli"),
    ("calibrated_error", "runs"),
    ("greedy", "cli runs"),
    ("greedy_equal", "tab precision precision_cli"),
    ("near_tie", "tab precision precision_cli"),
    ("diff_position", "precision precision_cli"),
    ("gap_spec", "precision precision_cli"),
    ("gap_base", "precision precision_cli"),
)


def columns(table: str) -> list[str]:
    """The columns a table of runs shows (SHOWN), in order."""
    return [name for name, tables in SHOWN if table in tables.split()]


def grid_frame(results: Sequence[Result]) -> pd.DataFrame:
    """One row per run, every Result field but the lists, plus wall_tokens_per_s, vs_best_hf,
    calibrated_error = |calibrated_speedup - speedup| / speedup (our rows with a prediction), greedy_ok
    (greedy rows: 1 when identical to the target alone or different only after a near-tie, else 0) and
    mean_acceptance_length (vLLM's: 1 + accepted / drafts, from the counters; nan without drafts)."""
    rows = []
    for r, ratio in zip(results, vs_best_hf(results)):
        row = {k: v for k, v in asdict(r).items() if k not in LISTS}
        predicted, measured = r.calibrated_speedup, r.speedup
        error = abs(predicted - measured) / measured if r.engine == "ours" and measured > 0 else nan
        ok = nan if r.greedy_equal is None else float(bool(r.greedy_equal or r.near_tie))
        rows.append(
            row
            | {
                "wall_tokens_per_s": r.wall_tokens_per_s,
                "vs_best_hf": ratio,
                "calibrated_error": error,
                "greedy_ok": ok,
                "mean_acceptance_length": r.counters.get("mean_acceptance_length", nan),
            }
        )
    return pd.DataFrame(rows, columns=FRAME_COLUMNS)
