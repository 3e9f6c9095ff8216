"""The benchmark grid: pairs x prompts x decode configs x drafters, every run through the one Runner.

Per (pair, prompt, sampling settings) the target alone runs first, through the same runner and engine
(RunSpec.baseline()); then each configuration, in an order rotated per prompt so that no configuration
always runs first or last on a noisy machine. Every figure of a row comes from trace.summarize (with
the baseline and the runner's cost profile of the target and drafter); greedy equality from
sametext.compare_outputs (near-ties in low precision told apart from real differences).

Used by the CLI (python -m playground.bench) and the UI's Sweep and Compare tabs (MAX_CELLS runs a request at most).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import product
from typing import Sequence


from playground import decoding, models, trace
from playground.trace import sametext
from playground.engine import speed
from playground.bench import hf
from playground.trace.results import Result, nan
from playground.trace.counters import SpecCounters
from playground.engine import clock
from playground.core.errors import PlaygroundError
from playground.models import LoadedPair
from playground.core.progress import Progress, quiet
from playground.core.records import RoundRecord
from playground.run.runner import Runner
from playground.core.config import DecodeConfig, KPolicy
from playground.run.spec import DrafterSpec, PairSpec, RunSpec, check_prompt, parse_k
from playground.core.treeshape import TreeShape, parse_tree

MAX_CELLS = 64  # runs of our engine in one UI request: pairs x prompts x temperatures x k values x drafters, and
# the target-alone baselines (one per pair, prompt and sampling settings)


# ---------------------------------------------------------------- the request


def decode_grid(
    ks: Sequence[str | int | tuple[int, KPolicy]],
    temps: Sequence[float],
    max_new_tokens: int = DecodeConfig.default("max_new_tokens"),
    seed: int = DecodeConfig.default("seed"),
    record: bool = DecodeConfig.default("record"),
    top_k: int = DecodeConfig.default("top_k"),
    top_p: float = DecodeConfig.default("top_p"),
    trees: Sequence[str | TreeShape] = (),
    confidence: float = DecodeConfig.default("confidence"),
) -> list[DecodeConfig]:
    """The decode configs of (k values, then token trees) x temperatures. A k is a (k, policy) pair or what
    spec.parse_k reads ("4", "adaptive" / "heuristic", "theory", "confidence"); a tree what treeshape.parse_tree
    reads ("3-2-1-1", "dynamic:12"), drafted whole every round (a fixed policy). confidence: the draft-confidence
    policy's threshold. The rest default to DecodeConfig's."""
    out = []
    shared = dict(
        max_new_tokens=max_new_tokens, top_k=top_k, top_p=top_p, seed=seed, record=record, confidence=confidence
    )
    for temperature in temps:
        for k in ks:
            k, policy = k if isinstance(k, tuple) else parse_k(k)
            out.append(DecodeConfig(k=k, policy=policy, temperature=temperature, **shared))
        for tree in trees:
            out.append(DecodeConfig(policy=KPolicy.FIXED, temperature=temperature, tree=parse_tree(tree), **shared))
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
    or, when none of them can, the first drafter that can (the draft model)."""
    if decode.tree is None:
        return list(drafters)
    first = next(kind for kind in decoding.DRAFTERS if decoding.strategy(kind).tree)
    return [d for d in drafters if decoding.strategy(d.kind).tree] or [DrafterSpec(first)]


def _baseline_decode(decode: DecodeConfig) -> DecodeConfig:
    """What the target alone shares with a config: sampling, seed, length, recording (not k, not the policy)."""
    return DecodeConfig(
        policy=KPolicy.FIXED,
        max_new_tokens=decode.max_new_tokens,
        temperature=decode.temperature,
        top_k=decode.top_k,
        top_p=decode.top_p,
        seed=decode.seed,
        record=decode.record,
    )


def _check(pairs, prompts, decodes, drafters, max_cells) -> None:
    if not (pairs and prompts and decodes and drafters):
        raise PlaygroundError("Nothing to run: give at least one pair, prompt, k, temperature and drafter.")
    runs, baselines = count_runs(pairs, prompts, decodes, drafters)
    if max_cells is not None and runs > max_cells:
        raise PlaygroundError(
            f"That grid needs {runs} runs ({len(pairs)} pairs x {len(prompts)} prompts x "
            f"{len(decodes)} k/temperature settings x {len(drafters)} drafters, and {baselines} of "
            f"the target alone to measure the speedups against); the limit is {max_cells}: fewer k "
            f"values, temperatures, prompts, pairs or drafters."
        )
    for prompt in prompts.values():
        check_prompt(prompt)
    for pair in pairs:  # builds (so validates) every spec before anything runs
        for decode in {d.tree: d for d in decodes}.values():  # a chain, and each tree shape
            for drafter in _drafters_of(pair, _drafters_for(decode, drafters)):
                RunSpec(pair, drafter, decode, next(iter(prompts.values())))


def own_drafter(pair_name: str, drafter: DrafterSpec) -> DrafterSpec:
    """What "draft model" means for a catalog pair in a grid or comparison: its own draft, through the drafter
    its tokenizers need (a cross-tokenizer pair's draft cannot run the same-tokenizer drafter). Every other
    choice stays: the cross-tokenizer drafter may run a same-tokenizer pair (what the text route costs)."""
    pair = models.pairs().get(pair_name)
    return drafter if pair is None else drafter.as_kind(decoding.for_pair(drafter.kind, pair.drafter))


def _drafters_of(pair: PairSpec, drafters: Sequence[DrafterSpec]) -> list[DrafterSpec]:
    """The drafters a pair runs: "draft model" is a cross-tokenizer catalog pair's own cross-tokenizer drafter."""
    return list(dict.fromkeys(own_drafter(pair.name, d) for d in drafters))


# ---------------------------------------------------------------- running one thing


def _run_ours(runner: Runner, spec: RunSpec, kernels: bool | None, progress: Progress):
    """(rounds, loaded pair, wall seconds, cost profile); warm-up and loading outside the clock."""
    with runner.session(spec, progress, fast_verify=kernels) as session:
        loaded = session.ready().pair
        start = clock(loaded.target.device)
        rounds = list(session.rounds())
        wall = clock(loaded.target.device) - start
        return rounds, loaded, wall, session.profile()


def _equality(
    rounds: list[RoundRecord], base: list[RoundRecord], decode: DecodeConfig, precision: str, exact: bool
) -> dict:
    if decode.temperature != 0:
        return {}
    cmp = sametext.compare_outputs(rounds, base, precision, exact)
    return dict(
        greedy_equal=cmp["equal"],
        near_tie=None if cmp["equal"] else cmp["near_tie"],
        diff_position=cmp["position"],
        gap_spec=cmp["gap_spec"],
        gap_base=cmp["gap_base"],
    )


def _draft_precision(spec: RunSpec, loaded: LoadedPair) -> str:
    """The precision the draft ran at: the draft model's, the target's for a drafter of the target's layers, the
    copy's for the target's own quantised copy (self int4)."""
    model = decoding.strategy(spec.drafter.kind).model
    if model == "draft" and loaded.draft_precision:
        return loaded.draft_precision.value
    if model == "copy":
        return spec.drafter.options.drafts_in
    return loaded.target_precision.value if model == "target" else ""


SUMMARY_FIELDS = ("alpha", "alpha_eval", "mean_accepted", "c", "v", "theory_speedup", "calibrated_speedup")


def _margins(rounds: list[RoundRecord]) -> list[float]:
    """One logit gap per output token (nan where a round recorded fewer), as sametext.margin_at reads them."""
    return [m for r in rounds for m in (r.margins + [nan] * (len(r.new_tokens) - len(r.margins)))]


def _ours(spec: RunSpec, category: str, rounds, loaded: LoadedPair, wall: float, profile, base) -> Result:
    s = trace.summarize(rounds, base, profile)
    is_base = spec.drafter.is_baseline
    return Result(
        pair=spec.pair.name,
        category=category,
        method=spec.drafter.label,
        drafter=spec.drafter.kind.value,
        engine="ours",
        k="" if is_base else spec.decode.k_label,
        temperature=spec.decode.temperature,
        target_precision=loaded.target_precision.value,
        draft_precision=_draft_precision(spec, loaded),
        kernels=_kernels(loaded),
        tokens=s["tokens"],
        seconds=s["wall_s"],
        tokens_per_s=s["tokens_per_s"],
        wall_s=wall,
        speedup=1.0 if is_base else s["speedup"],
        **{name: s[name] for name in SUMMARY_FIELDS},
        tree=spec.decode.tree.label if spec.decode.tree else "",
        nodes=nan if is_base else s["mean_k"],
        depth_acceptance=[] if is_base else trace.depth_acceptance(rounds),
        new_tokens=[t for r in rounds for t in r.new_tokens],
        counters=SpecCounters.from_dict(trace.vllm_metrics(rounds)).as_dict(),
        margins=_margins(rounds) if is_base else [],
        **({} if is_base else _equality(rounds, base, spec.decode, loaded.target_precision.value, loaded.invariant)),
    )


def _kernels(loaded: LoadedPair) -> str:
    return "batch-invariant" if loaded.invariant else "stock"


# ---------------------------------------------------------------- the grid


def run_grid(
    runner: Runner,
    pairs: Sequence[PairSpec],
    prompts: dict[str, str],
    decodes: Sequence[DecodeConfig],
    drafters: Sequence[DrafterSpec],
    compare_hf: bool = False,
    progress: Progress = quiet,
    max_cells: int | None = MAX_CELLS,
    stock_kernels: bool = False,
    chat: bool = True,
    rotate: int = 0,
) -> list[Result]:
    """Every (pair, prompt, decode, drafter), plus per (pair, prompt, sampling settings) the target alone
    and, with compare_hf, the HF peers (hf.configs_for). One row per run, in a stable order (baseline,
    then ours, then HF); the runs themselves go in an order rotated per prompt.

    max_cells caps the runs of our engine for the whole request (None: no cap; the CLI's benchmark).
    stock_kernels: the target on torch's stock kernels (neither the batch-invariant ones nor speed.fast_verify),
    for our runs and the HF peer alike (fast_verify put back as load_pair leaves it afterwards). rotate: added to
    each prompt's rotation (a repeat of the grid runs each prompt's jobs in another order)."""
    _check(pairs, prompts, decodes, drafters, max_cells)
    if stock_kernels:
        pairs = [replace(p, invariant=False) for p in pairs]
    groups: dict[DecodeConfig, list[DecodeConfig]] = {}
    for decode in decodes:
        groups.setdefault(_baseline_decode(decode), []).append(decode)
    total = len(prompts) * sum(
        1 + sum(len(_drafters_of(pair, _drafters_for(d, drafters))) for d in g)
        for pair in pairs
        for g in groups.values()
    )
    grid = _GridRun(runner, drafters, compare_hf, False if stock_kernels else None, _Count(progress, total, compare_hf))
    results: list[Result] = []
    try:
        for pair, (i, (category, prompt)), (base_decode, group) in product(
            pairs, enumerate(prompts.items()), groups.items()
        ):
            results += grid.group(
                RunSpec(pair, DrafterSpec.target_alone(), base_decode, prompt, chat),
                category,
                group,
                rotate=i + rotate,
            )
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

    def __init__(
        self, runner: Runner, drafters: Sequence[DrafterSpec], compare_hf: bool, kernels: bool | None, count: _Count
    ) -> None:
        self.runner, self.drafters, self.compare_hf, self.kernels, self.count = (
            runner,
            drafters,
            compare_hf,
            kernels,
            count,
        )
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
        jobs: list = [
            RunSpec(pair, d, decode, prompt, chat)
            for decode in group
            for d in _drafters_of(pair, _drafters_for(decode, self.drafters))
        ]
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


def _hf_jobs(
    pair: PairSpec, group: list[DecodeConfig], drafters: Sequence[DrafterSpec], prompt: str, chat: bool
) -> list[tuple]:
    """(HFConfig, RunSpec whose load gives the models it runs on) for the HF peers of a group, deduplicated."""
    jobs = {(hf.HFConfig(hf.HF_TARGET_ALONE)): RunSpec(pair, DrafterSpec.target_alone(), group[0], prompt, chat)}
    for decode in group:
        for d in drafters:
            # which draft object: the default's until loaded (its row names the precision the draft got)
            precision = (d.precision or models.default_draft_precision()).value if d.needs_draft_model else ""
            for config in hf.configs_for(d, decode, precision):
                jobs.setdefault(config, RunSpec(pair, d, decode, prompt, chat))
    return list(jobs.items())


def _run_hf(
    runner: Runner, job: tuple, category: str, base: list[RoundRecord], warm: set, progress: Progress
) -> Result:
    config, spec = job
    with runner.session(spec, progress, warm=False) as session:  # HF's generate: the very same target, same kernels
        loaded = session.ready().pair
        key = (id(loaded.target), id(loaded.draft), config.method)
        if key not in warm:
            hf.warm_up(loaded, config, spec.chat)
            warm.add(key)
        tokens, wall = hf.generate(loaded, config, spec.prompt, spec.decode, spec.chat)
    precision = loaded.target_precision.value
    return Result(
        pair=spec.pair.name,
        category=category,
        method=config.method,
        drafter=config.drafter.value,
        engine="hf",
        k=config.k_label,
        temperature=spec.decode.temperature,
        target_precision=precision,
        draft_precision=loaded.draft_precision.value if config.draft_precision else "",
        kernels=_kernels(loaded),
        tokens=len(tokens),
        seconds=wall,
        tokens_per_s=len(tokens) / wall if wall > 0 else nan,
        wall_s=wall,
        new_tokens=tokens,
        **_equality(sametext.as_rounds(tokens), base, spec.decode, precision, loaded.invariant),
    )
