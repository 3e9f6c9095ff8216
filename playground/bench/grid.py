"""The benchmark grid: pairs x prompts x decode configs x drafters, every run through the one Runner.

Per (pair, prompt, sampling settings) the target alone runs first, through the same runner and engine
(RunSpec.baseline()); then each configuration, in an order rotated per prompt so that no configuration
always runs first or last on a noisy machine. Every figure of a row comes from trace.summarize (with
the baseline and the runner's cost profile of the target and drafter); greedy equality from
trace.compare_outputs (near-ties in low precision told apart from real differences).

Used by the CLI (python -m playground.bench) and the UI's Sweep and Compare tabs (MAX_CELLS runs a request at most).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field, replace
from itertools import product
from typing import Sequence

import pandas as pd

from playground import decoding, models, speed, trace
from playground.bench import hf
from playground.bench.vllm_metrics import SpecCounters
from playground.engine import clock
from playground.errors import PlaygroundError
from playground.models import LoadedPair
from playground.progress import Progress, quiet
from playground.records import RoundRecord
from playground.runner import Runner
from playground.config import DEFAULT_CONFIDENCE, DecodeConfig, DrafterKind, KPolicy
from playground.spec import DrafterSpec, PairSpec, RunSpec, check_prompt, parse_k
from playground.treeshape import TreeShape, parse_tree

MAX_CELLS = 64  # runs of our engine in one UI request: pairs x prompts x temperatures x k values x drafters, and
# the target-alone baselines (one per pair, prompt and sampling settings)
nan = float("nan")


@dataclass
class Result:
    """One run: ours (a drafter, or the target alone) or an HF `generate` configuration."""

    pair: str
    category: str
    method: str  # our drafter's label ("draft model (int8)", "target alone", ...), an hf.HF_METHODS, a vLLM label
    drafter: str  # the drafter kind (spec.DrafterKind value); HF and vLLM rows: the kind of ours they correspond to
    engine: str  # "ours", "hf" or "vllm" (bench.vllm_peer)
    k: str  # "4", "heuristic", "theory"; HF: num_assistant_tokens, "heuristic", "hf default"; "" for the baselines
    temperature: float
    target_precision: str
    draft_precision: str  # "" without a draft model; early exit: the target's (it drafts with the target's layers)
    tokens: int
    seconds: float  # ours: engine time (trace.summarize's wall_s); HF: wall_s
    tokens_per_s: float  # tokens / seconds
    wall_s: float = nan  # perf_counter around the whole call (tokenising included), both engines
    kernels: str = ""  # the target's: "batch-invariant" (greedy output must equal the target alone's, exactly) or "stock"
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


# ---------------------------------------------------------------- the request

def decode_grid(ks: Sequence[str | int | tuple[int, KPolicy]], temps: Sequence[float], max_new_tokens: int = 64,
                seed: int = 0, record: bool = True, top_k: int = 0, top_p: float = 1.0,
                trees: Sequence[str | TreeShape] = (), confidence: float = DEFAULT_CONFIDENCE) -> list[DecodeConfig]:
    """The decode configs of (k values, then token trees) x temperatures. A k is a (k, policy) pair or what
    spec.parse_k reads ("4", "adaptive" / "heuristic", "theory", "confidence"); a tree what spec.parse_tree
    reads ("3-2-1-1", "dynamic:12"). confidence: the draft-confidence policy's threshold."""
    out = []
    shared = dict(max_new_tokens=max_new_tokens, top_k=top_k, top_p=top_p, seed=seed, record=record, confidence=confidence)
    for temperature in temps:
        for k in ks:
            k, policy = k if isinstance(k, tuple) else parse_k(k)
            out.append(DecodeConfig(k=k, policy=policy, temperature=temperature, **shared))
        for tree in trees:
            out.append(DecodeConfig(temperature=temperature, tree=parse_tree(tree), **shared))
    return list(dict.fromkeys(out))


def count_cells(pairs: Sequence, prompts: dict, decodes: Sequence, drafters: Sequence) -> int:
    """Runs of our engine a request asks for: each configuration, and the target alone once per pair, prompt and
    sampling settings (the baseline every speedup is measured against); the HF peers come on top."""
    return count_runs(pairs, prompts, decodes, drafters)[0]


def count_runs(pairs: Sequence, prompts: dict, decodes: Sequence, drafters: Sequence) -> tuple[int, int]:
    """(all runs of our engine, of which target-alone baselines) a request asks for."""
    baselines = len(pairs) * len(prompts) * len({_baseline_decode(d) for d in decodes})
    configs = len(prompts) * sum(len(_drafters_of(pair, _drafters_for(d, drafters))) for pair in pairs for d in decodes)
    return configs + baselines, baselines


def _drafters_for(decode: DecodeConfig, drafters: Sequence[DrafterSpec]) -> list[DrafterSpec]:
    """The drafters a config runs with: all of them for a chain; for a token tree those that can draft one,
    or the draft model when none of them can."""
    if decode.tree is None:
        return list(drafters)
    return [d for d in drafters if decoding.strategy(d.kind).tree] or [DrafterSpec(DrafterKind.DRAFT_MODEL)]


def _baseline_decode(decode: DecodeConfig) -> DecodeConfig:
    """What the target alone shares with a config: sampling, seed, length, recording (not k)."""
    return DecodeConfig(max_new_tokens=decode.max_new_tokens, temperature=decode.temperature, top_k=decode.top_k,
                        top_p=decode.top_p, seed=decode.seed, record=decode.record)


def _check(pairs, prompts, decodes, drafters, max_cells) -> None:
    if not (pairs and prompts and decodes and drafters):
        raise PlaygroundError("Nothing to run: give at least one pair, prompt, k, temperature and drafter.")
    runs, baselines = count_runs(pairs, prompts, decodes, drafters)
    if max_cells is not None and runs > max_cells:
        raise PlaygroundError(f"That grid needs {runs} runs ({len(pairs)} pairs x {len(prompts)} prompts x "
                              f"{len(decodes)} k/temperature settings x {len(drafters)} drafters, and {baselines} of "
                              f"the target alone to measure the speedups against); the limit is {max_cells}: fewer k "
                              f"values, temperatures, prompts, pairs or drafters.")
    for prompt in prompts.values():
        check_prompt(prompt)
    for pair in pairs:  # builds (so validates) every spec before anything runs
        for decode in {d.tree: d for d in decodes}.values():  # a chain, and each tree shape
            for drafter in _drafters_of(pair, _drafters_for(decode, drafters)):
                RunSpec(pair, drafter, decode, next(iter(prompts.values())))


def _drafters_of(pair: PairSpec, drafters: Sequence[DrafterSpec]) -> list[DrafterSpec]:
    """The drafters a pair runs: "draft model" is a cross-tokenizer catalog pair's own cross-tokenizer drafter."""
    return list(dict.fromkeys(models.own_drafter(pair.name, d) for d in drafters))


# ---------------------------------------------------------------- running one thing

def _run_ours(runner: Runner, spec: RunSpec, kernels: bool | None, progress: Progress):
    """(rounds, loaded pair, wall seconds, cost profile); warm-up and loading outside the clock."""
    with runner.session(spec, progress, fast_verify=kernels) as session:
        loaded = session.ready().pair
        start = clock(loaded.target.device)
        rounds = list(session.rounds())
        wall = clock(loaded.target.device) - start
        return rounds, loaded, wall, session.profile()


def _equality(rounds: list[RoundRecord], base: list[RoundRecord], decode: DecodeConfig, precision: str,
              exact: bool) -> dict:
    if decode.temperature != 0:
        return {}
    cmp = trace.compare_outputs(rounds, base, precision, exact)
    return dict(greedy_equal=cmp["equal"], near_tie=None if cmp["equal"] else cmp["near_tie"],
                diff_position=cmp["position"], gap_spec=cmp["gap_spec"], gap_base=cmp["gap_base"])


def _draft_precision(spec: RunSpec, loaded: LoadedPair) -> str:
    """The precision the draft ran at: the draft model's, the target's for a drafter of the target's layers."""
    model = decoding.strategy(spec.drafter.kind).model
    if model == "draft" and loaded.draft_precision:
        return loaded.draft_precision.value
    return loaded.target_precision.value if model == "target" else ""


SUMMARY_FIELDS = ("alpha", "alpha_eval", "mean_accepted", "c", "v", "theory_speedup", "calibrated_speedup")


def _margins(rounds: list[RoundRecord]) -> list[float]:
    """One logit gap per output token (nan where a round recorded fewer), as trace.margin_at reads them."""
    return [m for r in rounds for m in (r.margins + [nan] * (len(r.new_tokens) - len(r.margins)))]


def _ours(spec: RunSpec, category: str, rounds, loaded: LoadedPair, wall: float, profile, base) -> Result:
    s = trace.summarize(rounds, base, profile)
    is_base = spec.drafter.is_baseline
    return Result(
        pair=spec.pair.name, category=category, method=spec.drafter.label, drafter=spec.drafter.kind.value,
        engine="ours", k="" if is_base else spec.decode.k_label, temperature=spec.decode.temperature,
        target_precision=loaded.target_precision.value, draft_precision=_draft_precision(spec, loaded),
        kernels=_kernels(loaded), tokens=s["tokens"], seconds=s["wall_s"], tokens_per_s=s["tokens_per_s"], wall_s=wall,
        speedup=1.0 if is_base else s["speedup"], **{name: s[name] for name in SUMMARY_FIELDS},
        tree=spec.decode.tree.label if spec.decode.tree else "", nodes=nan if is_base else s["mean_k"],
        depth_acceptance=[] if is_base else trace.depth_acceptance(rounds),
        new_tokens=[t for r in rounds for t in r.new_tokens],
        counters=SpecCounters.from_dict(trace.vllm_metrics(rounds)).as_dict(),
        margins=_margins(rounds) if is_base else [],
        **({} if is_base else _equality(rounds, base, spec.decode, loaded.target_precision.value, loaded.invariant)))


def _kernels(loaded: LoadedPair) -> str:
    return "batch-invariant" if loaded.invariant else "stock"


# ---------------------------------------------------------------- the grid

def run_grid(runner: Runner, pairs: Sequence[PairSpec], prompts: dict[str, str], decodes: Sequence[DecodeConfig],
             drafters: Sequence[DrafterSpec], compare_hf: bool = False, progress: Progress = quiet,
             max_cells: int | None = MAX_CELLS, stock_kernels: bool = False, chat: bool = True) -> list[Result]:
    """Every (pair, prompt, decode, drafter), plus per (pair, prompt, sampling settings) the target alone
    and, with compare_hf, the HF peers (hf.configs_for). One row per run, in a stable order (baseline,
    then ours, then HF); the runs themselves go in an order rotated per prompt.

    max_cells caps the runs of our engine for the whole request (None: no cap; the CLI's benchmark).
    stock_kernels: the target on torch's stock kernels (neither the batch-invariant ones nor speed.fast_verify),
    for our runs and the HF peer alike (fast_verify put back as load_pair leaves it afterwards)."""
    _check(pairs, prompts, decodes, drafters, max_cells)
    if stock_kernels:
        pairs = [replace(p, invariant=False) for p in pairs]
    groups: dict[DecodeConfig, list[DecodeConfig]] = {}
    for decode in decodes:
        groups.setdefault(_baseline_decode(decode), []).append(decode)
    total = len(prompts) * sum(1 + sum(len(_drafters_of(pair, _drafters_for(d, drafters))) for d in g)
                               for pair in pairs for g in groups.values())
    grid = _GridRun(runner, drafters, compare_hf, False if stock_kernels else None, _Count(progress, total, compare_hf))
    results: list[Result] = []
    try:
        for pair, (i, (category, prompt)), (base_decode, group) in product(pairs, enumerate(prompts.items()),
                                                                            groups.items()):
            results += grid.group(RunSpec(pair, DrafterSpec(DrafterKind.TARGET_ALONE), base_decode, prompt, chat),
                                  category, group, rotate=i)
    finally:
        if stock_kernels:
            for target in {id(t): t for t in grid.touched}.values():
                speed.fast_verify(target, models.fast_verify_default())
    progress("done", 1.0)
    return results


@dataclass
class _Count:
    """The grid's progress line: "[done + 1/total] label" for each run of our engine (HF runs are not counted)."""

    progress: Progress
    total: int
    hf: bool
    done: int = 0

    def start(self, label: str, counted: bool = True) -> None:
        head = f"[{self.done + 1}/{self.total}{'+HF' if self.hf else ''}] " if counted else ""
        self.progress(head + label, self.done / self.total)


class _GridRun:
    """One run_grid request: the runner, what each group compares, the progress count, the HF peers already
    warm, and the targets whose kernels it touched."""

    def __init__(self, runner: Runner, drafters: Sequence[DrafterSpec], compare_hf: bool, kernels: bool | None,
                 count: _Count) -> None:
        self.runner, self.drafters, self.compare_hf, self.kernels, self.count = runner, drafters, compare_hf, kernels, count
        self.hf_warm: set = set()
        self.touched: list = []

    def group(self, base_spec: RunSpec, category: str, group: list[DecodeConfig], rotate: int) -> list[Result]:
        """The target alone on one (pair, prompt, sampling settings), then every configuration of the group
        (and its HF peers), in an order rotated by `rotate`: one row each."""
        pair, prompt, chat = base_spec.pair, base_spec.prompt, base_spec.chat
        where = f"{pair.name} · {category} · T={base_spec.decode.temperature:g}"
        self.count.start(f"{where} · target alone")
        base, loaded, wall, profile = self._ours(base_spec)
        self.touched.append(loaded.target)
        rows = [_ours(base_spec, category, base, loaded, wall, profile, None)]
        jobs: list = [RunSpec(pair, d, decode, prompt, chat) for decode in group
                      for d in _drafters_of(pair, _drafters_for(decode, self.drafters))]
        if self.compare_hf:
            jobs += _hf_jobs(pair, group, _drafters_of(pair, self.drafters), prompt, chat)
        out: list[Result | None] = [None] * len(jobs)
        shift = rotate % len(jobs)
        for j in list(range(shift, len(jobs))) + list(range(shift)):
            job = jobs[j]
            if isinstance(job, RunSpec):
                self.count.start(f"{where} · {job.drafter.label} · k={job.decode.k_label}")
                rounds, loaded, wall, profile = self._ours(job)
                out[j] = _ours(job, category, rounds, loaded, wall, profile, base)
            else:
                self.count.start(f"{where} · {job[0].method} {job[0].k_label}", counted=False)
                out[j] = _run_hf(self.runner, job, category, base, self.hf_warm, self.count.progress)
        rows += [r for r in out if r is not None]
        hf_base = next((r for r in rows if r.method == hf.HF_TARGET_ALONE), None)
        for r in rows:
            if r.engine == "hf" and hf_base is not None:
                r.speedup = trace.speedup(r.tokens_per_s, hf_base.tokens_per_s)
        return rows

    def _ours(self, spec: RunSpec):
        out = _run_ours(self.runner, spec, self.kernels, self.count.progress)
        self.count.done += 1
        return out


def _hf_jobs(pair: PairSpec, group: list[DecodeConfig], drafters: Sequence[DrafterSpec], prompt: str,
             chat: bool) -> list[tuple]:
    """(HFConfig, RunSpec whose load gives the models it runs on) for the HF peers of a group, deduplicated."""
    jobs = {(hf.HFConfig(hf.HF_TARGET_ALONE)): RunSpec(pair, DrafterSpec(DrafterKind.TARGET_ALONE), group[0], prompt, chat)}
    for decode in group:
        for d in drafters:
            precision = (d.precision or models.default_draft_precision()).value if d.needs_draft_model else ""
            for config in hf.configs_for(d, decode, precision):
                jobs.setdefault(config, RunSpec(pair, d, decode, prompt, chat))
    return list(jobs.items())


def _run_hf(runner: Runner, job: tuple, category: str, base: list[RoundRecord], warm: set,
            progress: Progress) -> Result:
    config, spec = job
    with runner.session(spec, progress, warm=False) as session:  # HF's generate: the very same target, same kernels
        loaded = session.ready().pair
        key = (id(loaded.target), id(loaded.draft), config.method)
        if key not in warm:
            hf.warm_up(loaded, config, spec.chat)
            warm.add(key)
        tokens, wall = hf.generate(loaded, config, spec.prompt, spec.decode, spec.chat)
    precision = loaded.target_precision.value
    return Result(pair=spec.pair.name, category=category, method=config.method, drafter=config.drafter.value,
                  engine="hf", k=config.k_label, temperature=spec.decode.temperature, target_precision=precision,
                  draft_precision=config.draft_precision, kernels=_kernels(loaded), tokens=len(tokens), seconds=wall,
                  tokens_per_s=len(tokens) / wall if wall > 0 else nan, wall_s=wall, new_tokens=tokens,
                  **_equality(trace.as_rounds(tokens), base, spec.decode, precision, loaded.invariant))


# ---------------------------------------------------------------- the record-overhead mode

def record_overhead(runner: Runner, spec: RunSpec, reps: int, progress: Progress = quiet) -> dict:
    """What the UI's per-token records cost: the same spec with record on and off, interleaved `reps`
    times through the runner; medians of tokens/s (trace.summarize) and the relative slowdown."""
    if reps < 1:
        raise PlaygroundError(f"--record-overhead takes a number of repetitions >= 1, got {reps!r}.")
    tps: dict[bool, list[float]] = {True: [], False: []}
    with runner.session(spec, progress) as session:
        loaded = session.ready().pair
        for rep in range(reps):
            progress(f"record on/off: {rep + 1}/{reps}", rep / reps)
            for record in (True, False):
                rounds = list(session.rounds(spec.with_decode(record=record)))
                tps[record].append(trace.summarize(rounds)["tokens_per_s"])
    on, off = statistics.median(tps[True]), statistics.median(tps[False])
    return dict(drafter=spec.drafter.label, k=spec.decode.k_label, reps=reps, target_precision=loaded.target_precision.value,
                draft_precision=loaded.draft_precision.value if loaded.draft_precision else "",
                record_on_tps=on, record_off_tps=off, overhead=(off - on) / off, runs_on=tps[True], runs_off=tps[False])


# ---------------------------------------------------------------- the table the UI and the report read

LISTS = ("depth_acceptance", "new_tokens", "counters", "margins")  # Result fields kept out of the frame

def vs_best_hf(results: Sequence[Result]) -> list[float]:
    """Per row of ours: its wall-clock tokens/s over the best HF speculative configuration's (hf.HF_SPECULATIVE)
    on the same pair, target precision, prompt and temperature; nan for HF rows and where none ran.
    Wall clock on both sides: HF's generate has no engine-time split like ours."""
    best: dict[tuple, float] = {}
    for r in results:
        if r.engine == "hf" and r.method in hf.HF_SPECULATIVE and not math.isnan(r.wall_tokens_per_s):
            key = (r.pair, r.target_precision, r.category, r.temperature)
            best[key] = max(best.get(key, 0.0), r.wall_tokens_per_s)
    out = []
    for r in results:
        top = best.get((r.pair, r.target_precision, r.category, r.temperature))
        out.append(r.wall_tokens_per_s / top if r.engine == "ours" and top else nan)
    return out


FRAME_COLUMNS = [f for f in Result.__dataclass_fields__ if f not in LISTS] + [
    "wall_tokens_per_s", "vs_best_hf", "calibrated_error", "greedy_ok", "mean_acceptance_length"]


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
        rows.append(row | {"wall_tokens_per_s": r.wall_tokens_per_s, "vs_best_hf": ratio, "calibrated_error": error,
                           "greedy_ok": ok, "mean_acceptance_length": r.counters.get("mean_acceptance_length", nan)})
    return pd.DataFrame(rows, columns=FRAME_COLUMNS)
