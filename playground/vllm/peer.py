"""vLLM beside our engine: rows of the benchmark grid (`--compare-vllm`) and of the Compare pairs tab.

The same pair (its converted folders: what our engine loads), the same target precision, the same prompts
(our own encoded token ids, chat template included, so both engines see identical tokens) and the same k.
vLLM's target alone, its draft-model method at our k and its ngram method (prompt lookup with our
max_ngram), at each temperature of the grid. One vLLM engine per method (and k) for all the prompts and
temperatures of a pair: an engine start costs seconds on the tiny pairs and minutes on real ones.

Where vLLM runs (`VLLMEngine`): started here in vLLM's environment (vllm.engine.run_worker), or an existing
OpenAI-compatible vLLM server given by URL (vllm.server.VLLMServer; any number of GPUs or nodes). A
server's speculative config is its own; a second URL may name a server of the same model without
speculation, vLLM's target alone there, for the speedup.

Each vLLM run is a grid.Result with engine "vllm": tokens/s from vLLM's wall time of the request (prompt pass
included), speedup over vLLM's own target alone on the same prompt and temperature, acceptance from its
counters (alpha = accepted / drafted; mean_accepted = accepted per draft round, as ours), the counters under
vLLM's names (ours carry the same, from trace.vllm_metrics), and greedy output compared with our target
alone's (sametext.compare_outputs, near-ties told apart by our target's logit gaps). vLLM exposes no per-token
verdicts: only these counters.

vLLM's draft runs at the target's dtype (it has no int8 draft): its rows say so in draft_precision.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence


from playground import decoding, models, trace
from playground.env import outbound, settings
from playground.trace import sametext
from playground.trace.results import Result
from playground.vllm.engine import METHOD_LABELS, METHODS, VLLMRequest, VLLMRun, run_worker, vllm_python
from playground.vllm.models import max_model_len
from playground.vllm.server import ServerInfo, VLLMServer
from playground.core.errors import PlaygroundError
from playground.core.progress import Progress, quiet
from playground.run.runner import Runner, encode_prompt
from playground.core.config import DecodeConfig, KPolicy, Precision
from playground.run.spec import DrafterSpec, PairSpec, RunSpec
from playground.views.grid import BASELINE as TARGET_ALONE  # a target-alone row's drafter

VLLM_DTYPES = {Precision.FP32: "float32", Precision.BF16: "bfloat16", Precision.FP16: "float16"}
SERVER, SERVER_TARGET = "vLLM server", "vLLM server target alone"
# the vLLM methods run beside ours: the strategies' vLLM adapters where the bench runs them (Strategy.vllm, Peer.bench)
BENCH_METHODS = tuple(
    m for m in METHODS[1:] if any(s.vllm.adapter == m and s.vllm.bench for s in decoding.REGISTRY.values())
)
# vLLM's method -> the drafter of ours it stands beside (a row's `drafter`; decoding.benched)
OUR_DRAFTER = {"target": TARGET_ALONE} | {m: decoding.benched("vllm", m).value for m in BENCH_METHODS}
PROBE = "Speculative decoding: def quick_brown_fox(n): return n * 12345  # ok?"  # for the tokenizer check
nan = float("nan")


@dataclass(frozen=True)
class VLLMEngine:
    """Where and how vLLM runs. url None: started here, in vLLM's environment, one engine per method."""

    url: str | None = None  # an OpenAI-compatible vLLM server (http://host:port)
    model: str | None = None  # the model it serves, when it serves several
    target_url: str | None = None  # a server of the same model without speculation: the speedup's baseline
    threads_bind: str | None = None  # VLLM_CPU_OMP_THREADS_BIND (None: vLLM's "auto", which keeps a core free)
    draft_sample_method: str | None = None  # None: vLLM's default, "greedy"; "probabilistic": drafts sampled from p
    fast_start: bool = False  # no torch.compile, one process: starts in seconds (tests), not vLLM's layout
    timeout_s: float | None = None  # per engine (None: vllm.engine.default_timeout), or per server request
    api_key: str | None = field(default=None, repr=False)  # the user's, for the servers they gave: never shown

    @property
    def where(self) -> str:
        return f"the vLLM server at {self.url}" if self.url else "vLLM started here"


# Where the Compare pairs tab's vLLM row comes from (engine_choice reads the tab's values)
NO_VLLM, VLLM_HERE, VLLM_URL = "none", "vLLM started here (same pair)", "a vLLM server (URL)"
VLLM_SOURCES = (NO_VLLM, VLLM_HERE, VLLM_URL)
HERE = VLLMEngine()  # vLLM's own defaults (torch.compile, its process layout): what a deployment runs


def engine_choice(
    source: str | None, url: str = "", model: str = "", target_url: str = "", api_key: str = ""
) -> VLLMEngine | None:
    """The tab's vLLM choice as a VLLMEngine (None: no vLLM row); a bad value raises PlaygroundError naming it. A URL
    must be one PLAYGROUND_VLLM_URLS allows (outbound.Policy); `api_key`, the user's for those servers, is sent to
    them alone."""
    url, model, target_url, api_key = ("" if v is None else v for v in (url, model, target_url, api_key))
    for text in (url, target_url, model, api_key):
        if not isinstance(text, str) or len(text) > 500:
            raise PlaygroundError(
                "vLLM server: a URL, model name or key is too long or not text (500 characters at most)."
            )
    url, model, target_url, api_key = (v.strip() for v in (url, model, target_url, api_key))
    if source in (None, "", NO_VLLM):
        return None
    if source == VLLM_HERE:
        return HERE
    if source != VLLM_URL:
        raise PlaygroundError(f"Unknown vLLM engine choice {source!r}; one of {list(VLLM_SOURCES)}.")
    if not url:
        raise PlaygroundError("vLLM server: give its URL (http://host:port), or choose no vLLM row.")
    base = VLLMServer(url, api_key=api_key).base  # its form, the allow-list and the key, checked now (nothing sent)
    target_base = VLLMServer(target_url).base if target_url else None
    return VLLMEngine(url=base, model=model or None, target_url=target_base, api_key=api_key or None)


def url_allowed() -> bool:
    """Whether this app reaches any vLLM server by URL (PLAYGROUND_VLLM_URLS is not empty)."""
    return outbound.Policy.of(settings.read().vllm_urls).open


def check(engine: VLLMEngine, should_stop: Callable[[], bool] | None = None) -> dict[str, ServerInfo]:
    """Before any run of ours: vLLM's environment is here, or each server answers as vLLM and serves the model
    (seconds: a deadline of 10 s per request). What each server is, by URL: run_peer's `checked`, so that the job
    does not ask again."""
    if engine.url is None:
        vllm_python()
        return {}
    urls = [u for u in (engine.url, engine.target_url) if u]
    key = engine.api_key
    return {u: VLLMServer(u, engine.model, api_key=key, should_stop=should_stop).check() for u in urls}


def method_of(drafter: DrafterSpec) -> str:
    """The vLLM method the bench runs beside one of our drafters (its Strategy.vllm, where Peer.bench): the draft
    model (staged drafts with it too) -> "draft_model", prompt lookup -> "ngram"; "" for a drafter with no vLLM
    equivalent (early exit, a draft of another tokenizer)."""
    peer = decoding.strategy(drafter.kind).vllm
    return peer.adapter if peer.bench and peer.adapter in BENCH_METHODS else ""


def methods_for(drafters: Sequence[DrafterSpec]) -> list[str]:
    """vLLM's methods for our drafters (method_of), in BENCH_METHODS' order."""
    wanted = {method_of(d) for d in drafters}
    return [m for m in BENCH_METHODS if m in wanted]


def vllm_ks(decodes: Sequence[DecodeConfig]) -> list[int]:
    """The k values vLLM runs at: the grid's fixed k values, else the starting k of its adaptive chains."""
    chains = [d for d in decodes if d.tree is None] or list(decodes)
    fixed = [d.k for d in chains if d.policy is KPolicy.FIXED]
    return list(dict.fromkeys(fixed or [d.k for d in chains]))


# ---------------------------------------------------------------- rows


def _base_rows(results: Sequence[Result]) -> dict[tuple, Result]:
    return {
        (r.pair, r.target_precision, r.category, r.temperature): r
        for r in results
        if r.engine == "ours" and r.drafter == TARGET_ALONE
    }


def _row(
    pair: str,
    category: str,
    precision: str,
    run_label: str,
    drafter: str,
    k: str,
    draft_precision: str,
    r,
    base: Result | None,
) -> Result:
    """One vLLM generation as a grid row (speedup filled in later, against vLLM's own target alone)."""
    c = r.counters
    equality = {}
    if r.temperature == 0 and base is not None:
        cmp = sametext.compare_outputs(
            sametext.as_rounds(r.token_ids), sametext.as_rounds(base.new_tokens, base.margins), precision
        )
        equality = dict(
            greedy_equal=cmp["equal"],
            near_tie=None if cmp["equal"] else cmp["near_tie"],
            diff_position=cmp["position"],
            gap_spec=cmp["gap_spec"],
            gap_base=cmp["gap_base"],
        )
    return Result(
        pair=pair,
        category=category,
        method=run_label,
        drafter=drafter,
        engine="vllm",
        k=k,
        temperature=r.temperature,
        target_precision=precision,
        draft_precision=draft_precision,
        tokens=len(r.token_ids),
        seconds=r.wall_s,
        tokens_per_s=r.tokens_per_s,
        wall_s=r.wall_s,
        alpha=c.draft_acceptance_rate,
        mean_accepted=c.mean_acceptance_length - 1,  # vLLM's length counts the target's own token
        new_tokens=list(r.token_ids),
        counters=c.as_dict(),
        **equality,
    )


def _speedups(rows: list[Result], baseline_method: str) -> None:
    """Each row's tokens/s over vLLM's target alone on the same pair, precision, prompt and temperature."""
    base = {
        (r.pair, r.target_precision, r.category, r.temperature): r.tokens_per_s
        for r in rows
        if r.method == baseline_method
    }
    for r in rows:
        top = base.get((r.pair, r.target_precision, r.category, r.temperature))
        r.speedup = trace.speedup(r.tokens_per_s, top) if top else nan


def _rows(
    run: VLLMRun, pair: str, precision: str, drafter: str, k: str, draft_precision: str, bases: dict[tuple, Result]
) -> list[Result]:
    return [
        _row(pair, r.id, precision, run.label, drafter, k, draft_precision, r, bases.get((pair, precision, r.id, 0.0)))
        for r in run.results
    ]


# ---------------------------------------------------------------- running


def run_peer(
    runner: Runner,
    results: Sequence[Result],
    pairs: Sequence[PairSpec],
    prompts: dict[str, str],
    decodes: Sequence[DecodeConfig],
    drafters: Sequence[DrafterSpec],
    engine: VLLMEngine,
    methods: Sequence[str] | None = None,
    chat: bool = True,
    progress: Progress = quiet,
    should_stop: Callable[[], bool] | None = None,
    checked: Mapping[str, ServerInfo] | None = None,
    off_device: Callable[[], None] | None = None,
) -> tuple[list[Result], list[dict]]:
    """vLLM's rows for a grid that ran (`results`: our target alone's rows give the greedy reference), and what
    each vLLM engine was (label, version, load seconds, its arguments). `methods`: vLLM's ("draft_model",
    "ngram"; None: those of `drafters`, methods_for); the target alone always runs. Engines started here run
    every pair; a server serves one model: the first pair's (its tokenizer is checked against the pair's).
    `checked`: check()'s answer from before the job (not asked again); `off_device`: called once a server's rows
    need nothing more of this machine's device (the device queue may then start another job)."""
    if not pairs or not prompts or not decodes:
        raise PlaygroundError("vLLM: nothing to run (no pair, prompt or decode setting).")
    if engine.url is None:
        vllm_python()  # first: without vLLM's environment nothing else matters
    bases = _base_rows(results)
    setting = _Setting(
        decodes[0],
        tuple(dict.fromkeys(d.temperature for d in decodes)),
        vllm_ks(decodes),
        {m: d.options for d in reversed(drafters) if (m := method_of(d)) and d.kind is decoding.peered("vllm", m)},
    )
    methods = list(methods_for(drafters) if methods is None else methods)
    rows: list[Result] = []
    engines: list[dict] = []
    for pair in pairs if engine.url is None else pairs[:1]:
        spec = RunSpec(pair, DrafterSpec.target_alone(), decodes[0], next(iter(prompts.values())), chat)
        with runner.session(spec, warm=False) as session:  # the tokenizer and the target's precision
            loaded = session.load()
        ids = {
            category: encode_prompt(loaded.tokenizer, prompt, chat)[0].tolist() for category, prompt in prompts.items()
        }
        if engine.url is None:
            runs = _run_here(pair, ids, loaded.target_precision, setting, engine, methods, progress, should_stop)
        else:
            if off_device is not None:
                off_device()  # from here on only the network: no user waits on the server for the device
            runs = _run_server(ids, loaded.tokenizer, setting, engine, progress, should_stop, checked or {})
        precision = loaded.target_precision.value
        got: list[Result] = []
        for run, drafter, k, draft_precision in runs:
            got += _rows(run, pair.name, precision, drafter, k, draft_precision, bases)
            engines.append(
                {
                    "pair": pair.name,
                    "label": run.label,
                    "k": k,
                    "vllm_version": run.vllm_version,
                    "device": run.device,
                    "load_s": run.load_s,
                    "engine": run.engine,
                    "totals": run.totals.as_dict(),
                }
            )
        _speedups(got, SERVER_TARGET if engine.url else METHOD_LABELS["target"])
        rows += got
    return rows, engines


@dataclass(frozen=True)
class _Setting:
    """What every vLLM engine of a run shares with the grid."""

    decode: DecodeConfig  # max_new_tokens, top_p, top_k, seed (the grid's settings share them)
    temperatures: tuple[float, ...]
    ks: list[int]
    # vLLM's method -> the Options of the first drafter of its strategy's kind (what Peer.config reads); else defaults
    options: dict


def _run_here(
    pair: PairSpec,
    ids: dict,
    precision: Precision,
    setting: _Setting,
    engine: VLLMEngine,
    methods: list[str],
    progress: Progress,
    should_stop,
) -> list[tuple]:
    """One engine per method and k, started in vLLM's environment: [(VLLMRun, drafter, k, draft precision)]."""
    if precision not in VLLM_DTYPES:
        raise PlaygroundError(f"vLLM has no {precision.value} target precision.")
    catalog = models.pairs().get(pair.name)
    if not pair.draft or (catalog is not None and decoding.two_tokenizers(catalog.drafter)):
        methods = [m for m in methods if not _drafts(m)]  # vLLM's draft model needs the target's vocabulary
    target = models.model_folder(pair.target)
    draft = models.model_folder(pair.draft) if any(_drafts(m) for m in methods) else None
    plan = [("target", 0)] + [(m, k) for m in methods for k in setting.ks]
    d = setting.decode
    out = []
    for i, (method, k) in enumerate(plan):
        request = VLLMRequest(
            target=target,
            draft=draft if _drafts(method) else None,
            method=method,
            dtype=VLLM_DTYPES[precision],
            k=max(k, 1),
            options=setting.options.get(method),
            max_tokens=d.max_new_tokens,
            temperatures=setting.temperatures,
            top_p=d.top_p,
            top_k=d.top_k,
            seed=d.seed,
            cpu_threads_bind=engine.threads_bind,
            draft_sample_method=engine.draft_sample_method if _drafts(method) else None,
            enforce_eager=engine.fast_start,
            in_process=engine.fast_start,
            max_model_len=max_model_len(target, ids, d.max_new_tokens),
        )
        what = request.label + (f" k={k}" if k else "")
        progress(
            f"vLLM · {pair.name} · {what}: starting its engine ({i + 1}/{len(plan)}; minutes for a real "
            "model on a CPU), then every prompt",
            i / len(plan),
        )
        run = run_worker(request, ids, engine.timeout_s, should_stop)
        out.append((run, OUR_DRAFTER[method], str(k) if k else "", precision.value if _drafts(method) else ""))
    return out


def _drafts(method: str) -> bool:
    """Whether vLLM's method runs a draft model (its strategy's Strategy.draft_model)."""
    return method != "target" and decoding.strategy(decoding.peered("vllm", method)).draft_model


def _run_server(
    ids: dict, tokenizer, setting: _Setting, engine: VLLMEngine, progress: Progress, should_stop, checked: Mapping
) -> list[tuple]:
    """The server (and its target alone, when given), checked: reachable, vLLM, the model (`checked` already, else
    now), our tokenizer."""
    d = setting.decode
    out = []
    for url, baseline in ((engine.url, False), (engine.target_url, True)):
        if not url:
            continue
        timeout_s, key = engine.timeout_s or 300.0, engine.api_key
        server = VLLMServer(
            url, engine.model, timeout_s, api_key=key, should_stop=should_stop, checked=checked.get(url)
        )
        info = server.check()
        theirs = server.tokenize(PROBE)
        if theirs is not None and theirs != tokenizer(PROBE, add_special_tokens=False).input_ids:
            raise PlaygroundError(
                f"The vLLM server at {server.base} serves {info.model!r}, whose tokenizer is not "
                "the pair's target's (the same text gives other token ids): start it on the pair's "
                "target, or pick the pair it serves."
            )
        if baseline and info.speculative:
            raise PlaygroundError(
                f"The target-alone server at {server.base} speculates (its /metrics has spec-decode "
                "counters): give a server of the same model without a speculative config."
            )
        # a server that does not speculate, with no other URL given, is vLLM's target alone itself
        label = SERVER_TARGET if baseline or not (info.speculative or engine.target_url) else SERVER
        progress(f"vLLM · {server.base} · {info.model}: every prompt, one at a time", 0.5)
        run = server.run(
            ids,
            d.max_new_tokens,
            setting.temperatures,
            d.seed,
            top_p=d.top_p,
            top_k=d.top_k,
            should_stop=should_stop,
            label=label,
        )
        k = len(run.totals.num_accepted_tokens_per_pos)  # the server's num_speculative_tokens, as far as it drafted
        out.append((run, TARGET_ALONE if label == SERVER_TARGET else SERVER, str(k) if k else "", ""))
    return out
