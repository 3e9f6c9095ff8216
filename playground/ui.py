"""The Gradio web UI: layout first, then the callbacks as plain functions.

The callbacks only call playground functions: models.load_pair to load (cached),
session.decoder to run (the one decoding loop), render/charts/trace to show the rounds.
"""
from __future__ import annotations

import html
import json
import math
import tempfile
import time
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

import gradio as gr
import pandas as pd

from playground import bench, charts, drafters, engine, export, models, render, session, teach, theory, trace
from playground.engine import DecodeConfig, RoundRecord
from playground.errors import PlaygroundError

ASSETS = Path(__file__).resolve().parent.parent / "assets"
PROMPTS_FILE = ASSETS / "prompts.json"
CSS_FILE = ASSETS / "style.css"
TEXT_EVERY_S = 0.1  # send the text at most this often (every round when rounds are slower)
CHART_EVERY_S = 1.0  # redraw the charts at most this often while a run streams
STOP_SETTLE_S = 0.25  # Stop waits this long so that its view is the last one

try:  # on Hugging Face Spaces (ZeroGPU) the generation runs under spaces.GPU; elsewhere as is
    import spaces

    gpu: Callable = spaces.GPU
except ImportError:
    def gpu(fn: Callable) -> Callable:
        return fn


FIXED_K = "fixed k"
THIS_PROMPT, BUILT_IN = "this prompt", "the built-in set (6 categories)"
K_POLICY_CHOICES = {FIXED_K: "fixed", "adaptive (heuristic)": "heuristic", "adaptive (theory)": "theory"}


# ---------------------------------------------------------------- state and outputs

@dataclass
class Run:
    """One generation, as the Stop button finds it (the generator fills it in place)."""

    prompt: str
    meta: dict
    tokenizer: Any = None
    rounds: list[RoundRecord] = field(default_factory=list)
    baseline: list[RoundRecord] = field(default_factory=list)
    comparing: bool = False
    stopped: bool = False  # set by Stop; the generator then ends without another update
    finished: bool = False  # the generator has shown its final view


class _Stopped(Exception):
    pass


class Session:
    """Per-browser-session value of the gr.State: the latest run, the step-through run."""

    def __init__(self) -> None:
        self.current: Run | None = None
        self.stepper: Any = None  # a Stepper


class View(NamedTuple):
    """What every callback yields, in the order of the outputs list. gr.skip() = unchanged."""

    status: Any
    tokens: Any
    compare: Any
    summary: Any
    acceptance: Any
    latency: Any
    histogram: Any
    positions: Any
    csv: Any
    json: Any


def unchanged(**changes: Any) -> View:
    values = {name: gr.skip() for name in View._fields}
    values.update(changes)
    return View(**values)


# ---------------------------------------------------------------- small pure helpers

def load_examples(path: Path = PROMPTS_FILE) -> list[dict]:
    """[{"category", "title", "prompt"}] from assets/prompts.json."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def status_html(message: str, level: str = "info") -> str:
    """The status line; level is info, busy, ok or error. The message is escaped."""
    return f'<div class="status status-{level}" role="status">{html.escape(message)}</div>'


def unexpected(exc: Exception) -> str:
    """The status line for an error nobody planned for: its type and first line, no traceback."""
    line = str(exc).splitlines()[0] if str(exc) else ""
    return status_html(f"Something went wrong: {type(exc).__name__}: {line}", "error")


def _fmt(x: Any, digits: int = 2, suffix: str = "") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{digits}f}{suffix}" if isinstance(x, float) else f"{x}{suffix}"


def summary_markdown(summary: dict, baseline: dict | None = None) -> str:
    """The summary panel of a run (numbers from trace.summarize)."""
    rows = [
        ("tokens/s", _fmt(summary["tokens_per_s"], 1) + (f" (target alone: {_fmt(baseline['tokens_per_s'], 1)})" if baseline else "")),
        ("measured speedup", _fmt(summary["speedup"], 2, "×") if baseline else "– (tick *Compare with target alone*)"),
        ("α acceptance (accepted / drafted)", _fmt(summary["alpha"], 3)),
        ("α of evaluated drafts", _fmt(summary["alpha_eval"], 3)),
        ("mean accepted tokens per round", _fmt(summary["mean_accepted"], 2)),
        ("tokens per round", _fmt(summary["tokens_per_round"], 2)),
        ("c (draft step / target step)", _fmt(summary["c"], 3)),
        (f"theoretical speedup (Leviathan, k = {max(1, round(summary['mean_k']))})", _fmt(summary["theory_speedup"], 2, "×")),
        ("best k for this α and c", _fmt(summary["best_k"])),
        ("rounds · tokens · time", f"{summary['rounds']} · {summary['tokens']} · {_fmt(summary['wall_s'], 2, ' s')}"),
    ]
    return "| measure | value |\n|---|---|\n" + "\n".join(f"| {name} | **{value}** |" for name, value in rows)


def compare_html(run: Run, spec_html: str, base_html: str, spec: dict, base: dict) -> str:
    """Both texts side by side with their speeds, and whether they match (greedy)."""
    spec_ids = [t for r in run.rounds for t in r.new_tokens]
    base_ids = [t for r in run.baseline for t in r.new_tokens]
    if run.meta["config"]["temperature"] > 0:
        verdict, level = ("Sampling (temperature > 0): both follow the target's distribution, but the random "
                          "draws differ, so the texts need not match."), "info"
    elif spec_ids == base_ids:
        verdict, level = "Identical outputs: greedy speculative decoding reproduced the target exactly.", "ok"
    else:
        at = next((i for i, (a, b) in enumerate(zip(spec_ids, base_ids)) if a != b), min(len(spec_ids), len(base_ids)))
        verdict, level = f"The outputs differ from token {at} on (numerical ties in the target's logits can do this).", "error"
    drafter = html.escape(run.meta["drafter"])
    return (
        f'<div class="compare">{status_html(verdict, level)}<div class="compare-cols">'
        f'<div class="compare-col"><h4>Speculative ({drafter}) · {_fmt(spec["tokens_per_s"], 1)} tokens/s</h4>{spec_html}</div>'
        f'<div class="compare-col"><h4>Target alone · {_fmt(base["tokens_per_s"], 1)} tokens/s</h4>{base_html}</div>'
        f"</div></div>"
    )


def write_trace(run: Run) -> tuple[str, str]:
    """trace.csv and trace.json in a fresh temporary folder (fixed names, never user input)."""
    folder = Path(tempfile.mkdtemp(prefix="spec-trace-"))
    baseline = trace.summarize(run.baseline) if run.baseline else None
    meta = dict(run.meta, prompt=run.prompt, baseline=baseline)
    (folder / "trace.csv").write_text(trace.to_csv(run.rounds), encoding="utf-8")
    (folder / "trace.json").write_text(trace.to_json(run.rounds, **meta), encoding="utf-8")
    return str(folder / "trace.csv"), str(folder / "trace.json")


def pair_info(name: str) -> str:
    try:
        pair = models.get_pair(name)
    except PlaygroundError as exc:
        return html.escape(str(exc))
    note = f"<br>{html.escape(pair.note)}" if pair.note else ""
    return (f'<div class="pair-info">draft <code>{html.escape(pair.draft)}</code> → '
            f'target <code>{html.escape(pair.target)}</code>{note}</div>')


def model_specs(pair_name: str, draft_id: str, target_id: str, drafter: str) -> tuple[str | None, str]:
    """(draft spec or None, target spec): the pair's, overridden by the custom ids when filled; checked."""
    if drafter not in session.DRAFTERS:
        raise PlaygroundError(f"Unknown drafter {drafter!r}; choose one of: {', '.join(session.DRAFTERS)}.")
    pair = models.get_pair(pair_name)
    draft = (draft_id or "").strip() or pair.draft
    target = (target_id or "").strip() or pair.target
    models.resolve(target)
    if drafter != session.DRAFT_MODEL:
        return None, target  # prompt lookup needs no draft model
    models.resolve(draft)
    return draft, target


def checked_by_us(component: gr.components.Component) -> gr.components.Component:
    """Let out-of-range API values through Gradio's own range check (whose message does not name the field)
    to DecodeConfig.validate, which names it. The browser keeps the slider's bounds."""
    component.preprocess = lambda payload: payload
    return component


# ---------------------------------------------------------------- callbacks

@dataclass
class Settings:
    """The shared controls, checked: what every tab runs with."""

    config: DecodeConfig
    drafter: str
    draft_spec: str | None
    target_spec: str
    exit_layer: int | None  # early exit: the target's layers that draft (None = default)
    prompt: str


def read_settings(pair_name: str, draft_id: str, target_id: str, drafter: str, k: float, adaptive: str | bool,
                  temperature: float, top_p: float, max_new_tokens: float, seed: float, prompt: str,
                  exit_layer: float | None = 0, explain: int = 0) -> Settings:
    """Check the controls; a PlaygroundError names the first bad one."""
    policy = K_POLICY_CHOICES.get(adaptive, adaptive) if isinstance(adaptive, str) else ("heuristic" if adaptive else "fixed")
    if policy not in ("fixed",) + engine.K_POLICIES:
        raise PlaygroundError(f"Unknown k policy {adaptive!r}; choose one of: {', '.join(K_POLICY_CHOICES)}.")
    config = DecodeConfig(max_new_tokens=max_new_tokens, k=k, adaptive=policy != "fixed",
                          policy=policy if policy != "fixed" else "heuristic",
                          temperature=temperature, top_p=top_p, seed=seed, explain=explain)
    config.validate()
    session.check_prompt(prompt)  # before any loading
    if exit_layer is None:
        exit_layer = 0
    if isinstance(exit_layer, bool) or not isinstance(exit_layer, (int, float)) or exit_layer < 0 \
            or not float(exit_layer).is_integer():
        raise PlaygroundError(f"The early-exit layer must be a whole number (0 = a quarter of the target's layers), got {exit_layer!r}.")
    draft_spec, target_spec = model_specs(pair_name, draft_id, target_id, drafter)
    return Settings(config, drafter, draft_spec, target_spec, int(exit_layer) or None, prompt)


def generate(pair_name: str, draft_id: str, target_id: str, drafter: str, k: float, adaptive: str | bool,
             temperature: float, top_p: float, max_new_tokens: float, seed: float, prompt: str,
             compare: bool, exit_layer: float, state: Session | None, progress: gr.Progress = gr.Progress()) -> Iterator[View]:
    """Load (cached), run the speculative decoder round by round, optionally the target alone; stream it all."""
    try:
        settings = read_settings(pair_name, draft_id, target_id, drafter, k, adaptive, temperature, top_p,
                                 max_new_tokens, seed, prompt, exit_layer)
        config, draft_spec, target_spec = settings.config, settings.draft_spec, settings.target_spec
        loading = f"Loading {target_spec}" + (f" and {draft_spec}" if draft_spec else "") + " …"
        yield unchanged(status=status_html(loading, "busy"), tokens=render.empty_output("Waiting for the first round …"),
                        compare="", summary="", csv=gr.update(value=None, interactive=False),
                        json=gr.update(value=None, interactive=False))
        meta = {"pair": pair_name, "draft": draft_spec, "target": target_spec, "drafter": drafter, "exit_layer": settings.exit_layer, "config": asdict(config)}
        run = Run(prompt=prompt, meta=meta, comparing=bool(compare))
        if state is not None:
            state.current = run  # from now on Stop finds this run
        pair = models.load_pair(draft_spec, target_spec, progress=lambda msg, f: progress(f, desc=msg))
        run.tokenizer = pair.tokenizer
        if run.stopped:
            return
        with pair.in_use():  # the model cache never evicts a pair while it generates
            todo = cold(pair, drafter, settings.exit_layer, compare)
            if todo:
                yield unchanged(status=status_html("Warming up (once per model and drafter) …", "busy"))
                warm_up(pair, todo)
            yield from _stream(run, pair, drafter, config, run.rounds, "Speculative", exit_layer=settings.exit_layer)
            spec = trace.summarize(run.rounds)
            spec_html = render.render_rounds(run.rounds, pair.tokenizer, prompt)
            if compare:
                yield from _stream(run, pair, session.TARGET_ALONE, DecodeConfig(**asdict(config)), run.baseline,
                                   "Target alone", baseline=True)
        run.finished = True
        yield _final(run, spec_html, f"Done: {spec['tokens']} tokens in {spec['rounds']} rounds ({_stop_reason(run.rounds)}).", "ok")
    except _Stopped:  # Stop has shown the partial run: send nothing after it
        return
    except PlaygroundError as exc:
        yield unchanged(status=status_html(str(exc), "error"))
    except Exception as exc:  # keep serving; say what broke in one line
        yield unchanged(status=unexpected(exc))


_WARM: "weakref.WeakKeyDictionary[Any, set]" = weakref.WeakKeyDictionary()  # target model -> warmed drafters


def cold(pair: models.LoadedPair, drafter: str, exit_layer: int | None, baseline: bool) -> list[tuple]:
    """The (drafter, exit layer, draft model) this run needs that have not run on this target yet."""
    done = _WARM.get(pair.target, set())
    needed = [(drafter, exit_layer, pair.draft_spec if drafter == session.DRAFT_MODEL else None)]
    if baseline:
        needed.append((session.TARGET_ALONE, None, None))
    return [key for key in needed if key not in done]


def warm_up(pair: models.LoadedPair, todo: list[tuple]) -> None:
    """The first generation after a load pays one-time costs (the int8 draft's quantisation, kernel
    and allocator warm-up; measured on the default pair: 2.5 tok/s on a first run, 3.9 on the next):
    pay them on 4 tokens, outside the timed run, as the benchmark does, so the numbers are the steady state."""
    for key in todo:
        drafter, exit_layer, _ = key
        list(session.decoder(pair, drafter, "Hello", DecodeConfig(max_new_tokens=4, k=2), exit_layer=exit_layer))
        _WARM.setdefault(pair.target, set()).add(key)


def _stream(run: Run, pair: models.LoadedPair, drafter: str, config: DecodeConfig, into: list[RoundRecord],
            label: str, baseline: bool = False, exit_layer: int | None = None) -> Iterator[View]:
    """Iterate one decoder and show each round as it comes: the speculative run in the token box
    (with the charts every CHART_EVERY_S), the target-alone run in the comparison panel."""
    decoder = session.decoder(pair, drafter, run.prompt, config, exit_layer=exit_layer)
    spans: list[str] = []
    context: list[int] = []
    last_text = last_chart = 0.0
    for record in decoder:
        into.append(record)
        if run.stopped:
            raise _Stopped
        spans.append(render.round_spans(record, pair.tokenizer, context))
        now = time.monotonic()
        if now - last_text < TEXT_EVERY_S and not record.stop:
            yield unchanged()  # rounds faster than a browser repaints: send nothing new this time
            continue
        last_text = now
        text = render.wrap("".join(spans), run.prompt)
        message = status_html(f"{label}: round {record.round + 1}, {record.total_new} / {config.max_new_tokens} tokens …", "busy")
        if baseline:
            yield unchanged(status=message, compare=f'<div class="compare"><h4>Target alone (running)</h4>{text}</div>')
            continue
        view = unchanged(status=message, tokens=text)
        if now - last_chart >= CHART_EVERY_S:
            acc, lat, hist, pos = charts.all_charts(trace.frame(into))
            view = view._replace(acceptance=acc, latency=lat, histogram=hist, positions=pos,
                                 summary=summary_markdown(trace.summarize(into)))
            last_chart = time.monotonic()
        yield view


def _stop_reason(rounds: list[RoundRecord]) -> str:
    reason = rounds[-1].stop if rounds else ""
    return {"eos": "end of text", "length": "token limit"}.get(reason, "stopped")


def _final(run: Run, spec_html: str, message: str, level: str) -> View:
    """Everything at the end of a run (or when stopped): text, comparison, summary, charts, downloads."""
    base = trace.summarize(run.baseline) if run.baseline else None
    spec = trace.summarize(run.rounds, base["tokens_per_s"] if base else None)
    comparison = ""
    if run.baseline:
        base_html = render.render_rounds(run.baseline, run.tokenizer, run.prompt)
        comparison = compare_html(run, spec_html, base_html, spec, base)
    acc, lat, hist, pos = charts.all_charts(trace.frame(run.rounds))
    csv_path, json_path = write_trace(run) if run.rounds else (None, None)
    return View(
        status=status_html(message, level), tokens=spec_html, compare=comparison,
        summary=summary_markdown(spec, base), acceptance=acc, latency=lat, histogram=hist, positions=pos,
        csv=gr.update(value=csv_path, interactive=csv_path is not None),
        json=gr.update(value=json_path, interactive=json_path is not None),
    )


def stop(state: Session | None) -> View:
    """The Stop button (the generate event is cancelled by `cancels=`): show what the run got so far."""
    run = state.current if state is not None else None
    if run is not None and run.finished:
        return unchanged()  # nothing is running: keep the finished run as shown
    if run is not None:
        run.stopped = True
        time.sleep(STOP_SETTLE_S)  # let an update computed before the flag leave first
    if run is None or not run.rounds:
        return unchanged(status=status_html("Stopped.", "info"))
    run.rounds = list(run.rounds)  # a snapshot: the decoder may still finish the round it was in
    spec_html = render.render_rounds(run.rounds, run.tokenizer, run.prompt)
    where = ""
    if run.baseline and not run.baseline[-1].stop:  # an unfinished baseline cannot be compared
        run.baseline, where = [], " during the target-alone comparison (no comparison)"
    tokens = sum(len(r.new_tokens) for r in run.rounds)
    return _final(run, spec_html, f"Stopped{where}: {tokens} tokens in {len(run.rounds)} rounds so far.", "info")


# ---------------------------------------------------------------- teaching tools (tabs)

EXPLAIN_TOP = 4  # alternatives shown per position in step-through


@dataclass
class Stepper:
    """A step-through run: the decoder waits between rounds for the Next round button."""

    decoder: Any
    tokenizer: Any
    prompt: str
    greedy: bool
    context: list[int] = field(default_factory=list)  # output ids so far


SHARED = ["pair", "draft_id", "target_id", "drafter", "k", "adaptive", "temperature", "top_p", "max_new", "seed",
          "prompt", "exit_layer"]  # the controls every tab reads, in read_settings' order


def step_start(pair_name, draft_id, target_id, drafter, k, adaptive, temperature, top_p, max_new_tokens, seed,
               prompt, exit_layer, state: Session | None) -> tuple[str, str, str]:
    """Start a step-through run with the shared settings: (status, text so far, round explanation)."""
    try:
        st = read_settings(pair_name, draft_id, target_id, drafter, k, adaptive, temperature, top_p,
                           max_new_tokens, seed, prompt, exit_layer, explain=EXPLAIN_TOP)
        pair = models.load_pair(st.draft_spec, st.target_spec)
        dec = session.decoder(pair, st.drafter, st.prompt, st.config, exit_layer=st.exit_layer)
    except PlaygroundError as exc:
        return status_html(str(exc), "error"), gr.skip(), gr.skip()
    if state is not None:
        state.stepper = Stepper(dec, pair.tokenizer, st.prompt, st.config.temperature == 0)
    return (status_html("Ready: press Next round to run the first round.", "info"),
            render.empty_output("Press Next round."), "")


def step_next(state: Session | None) -> tuple[str, str, str]:
    """Run one round of the step-through run and explain it."""
    stepper = getattr(state, "stepper", None)
    if stepper is None:
        return status_html("Press Start step-through first.", "error"), gr.skip(), gr.skip()
    if stepper.decoder.done:
        return status_html("This run is finished: press Start step-through for a new one.", "info"), gr.skip(), gr.skip()
    try:
        before = list(stepper.context)
        record = stepper.decoder.step()
    except Exception as exc:  # keep serving; say what broke in one line
        return unexpected(exc), gr.skip(), gr.skip()
    stepper.context.extend(record.new_tokens)
    rounds = stepper.decoder.rounds
    text = render.render_rounds(rounds, stepper.tokenizer, stepper.prompt)
    explanation = teach.explain_round(record, stepper.tokenizer, before, stepper.greedy)
    end = f" Finished ({_stop_reason(rounds)})." if record.stop else ""
    message = f"Round {record.round + 1}: {record.total_new} tokens so far.{end}"
    return status_html(message, "ok" if record.stop else "info"), text, explanation


def last_summary(state: Session | None) -> dict | None:
    """The summary of the session's last run as its panel shows it (c against the baseline when it ran)."""
    run = state.current if state is not None else None
    if run is None or not run.rounds:
        return None
    base = trace.summarize(run.baseline) if run.baseline and run.baseline[-1].stop else None
    return trace.summarize(run.rounds, base["tokens_per_s"] if base else None)


def theory_view(alpha: float, c: float, state: Session | None):
    """The theory explorer's figure and a line on the best k; the last run overlaid when there is one."""
    summary = last_summary(state)
    measured = teach.measured_point(summary) if summary else None
    try:
        fig = teach.theory_figure(float(alpha), float(c), measured=measured)
    except (PlaygroundError, TypeError, ValueError) as exc:
        return gr.skip(), status_html(str(exc), "error")
    best = theory.best_k(float(alpha), float(c))
    line = (f"Best k for α = {float(alpha):.2f}, c = {float(c):.2f}: **{best}**, expected speedup "
            f"{theory.speedup(float(alpha), best, float(c)):.2f}× ({theory.expected_tokens(float(alpha), best):.2f} tokens per round).")
    if measured:
        line += f" Diamond: the last run (k ≈ {measured['k']}, {measured['tokens_per_round']:.2f} tokens per round)."
    return fig, line


def theory_from_run(state: Session | None):
    """The last run's measured α and c, for the sliders."""
    s = last_summary(state)
    if s is None:
        return gr.skip(), gr.skip()
    if math.isnan(s["alpha_eval"]) or math.isnan(s["c"]):
        return gr.skip(), gr.skip()
    return round(min(0.99, s["alpha_eval"]), 2), round(min(1.0, s["c"]), 2)


def grid_csv(grid) -> str:
    path = Path(tempfile.mkdtemp(prefix="playground-grid-")) / "grid.csv"
    grid.to_csv(path, index=False)
    return str(path)


def _drafter_spec(st: Settings, pair: models.LoadedPair, drafter: str | None = None) -> str:
    """The benchmark's name of a drafter with the app's defaults (int8 draft on CPU, the exit layer)."""
    drafter = drafter or st.drafter
    if drafter == session.DRAFT_MODEL:
        return f"{drafter}:{session.default_precision(pair)}"
    if drafter == session.EARLY_EXIT and st.exit_layer:
        return f"{drafter}:{st.exit_layer}"
    return drafter


def run_sweep(pair_name, draft_id, target_id, drafter, k, adaptive, temperature, top_p, max_new_tokens, seed,
              prompt, exit_layer, ks_text: str, temps_text: str, prompt_set: str,
              progress: gr.Progress = gr.Progress(track_tqdm=True)):
    """k x temperature grid on this prompt (or the built-in set): status, three heatmaps, the table, CSV."""
    try:
        ks = teach.parse_list(ks_text, "k values", int, lambda v: engine.K_MIN <= v <= engine.K_MAX,
                              f"whole numbers {engine.K_MIN}..{engine.K_MAX}")
        temps = teach.parse_list(temps_text, "temperatures", float, lambda v: math.isfinite(v) and 0 <= v <= 2, "0..2")
        st = read_settings(pair_name, draft_id, target_id, drafter, ks[0], FIXED_K, temps[0], top_p,
                           max_new_tokens, seed, prompt if prompt_set == THIS_PROMPT else "built-in set", exit_layer)
        pair = models.load_pair(st.draft_spec, st.target_spec)
        prompts = {"this prompt": st.prompt} if prompt_set == THIS_PROMPT else dict(bench.PROMPTS)
        custom = models.Pair(pair_name, st.draft_spec, st.target_spec)  # the custom ids, when filled, win
        grid = teach.run_grid([custom], prompts, [str(v) for v in ks], temps, [_drafter_spec(st, pair)],
                              st.config.max_new_tokens, st.config.seed)
    except PlaygroundError as exc:
        return status_html(str(exc), "error"), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
    speed_fig, alpha_fig, theory_fig = teach.sweep_figures(grid)
    cells = len(grid[grid["method"] != session.TARGET_ALONE])
    return (status_html(f"Sweep done: {cells} runs, {len(prompts)} prompt(s).", "ok"), speed_fig, alpha_fig, theory_fig,
            grid.round(3), gr.update(value=grid_csv(grid), interactive=True))


def run_compare(pair_names: list[str], drafters: list[str], k, adaptive, temperature, top_p, max_new_tokens, seed,
                prompt, exit_layer, progress: gr.Progress = gr.Progress(track_tqdm=True)):
    """Several pairs and drafters on the same prompt and settings: status, bars, the table, CSV."""
    try:
        if not pair_names or not drafters:
            raise PlaygroundError("Pick at least one pair and one drafter to compare.")
        unknown = [d for d in drafters if d not in session.DRAFTERS]
        if unknown:
            raise PlaygroundError(f"Unknown drafter {unknown[0]!r}; choose from: {', '.join(session.DRAFTERS)}.")
        st = read_settings(pair_names[0], "", "", drafters[0], k, adaptive, temperature, top_p, max_new_tokens,
                           seed, prompt, exit_layer)
        specs = [models.get_pair(name) for name in pair_names]
        k_name = {"fixed": str(st.config.k), "heuristic": "adaptive", "theory": "theory"}[K_POLICY_CHOICES.get(adaptive, adaptive)]
        frames = []
        for spec in specs:
            pair = models.load_pair(spec.draft if session.DRAFT_MODEL in drafters else None, spec.target)
            names = [_drafter_spec(st, pair, d) for d in drafters]  # each pair's own draft precision default
            if session.DRAFT_MODEL not in drafters:
                spec = models.Pair(spec.name, None, spec.target)
            frames.append(teach.run_grid([spec], {"prompt": st.prompt}, [k_name], [st.config.temperature], names,
                                         st.config.max_new_tokens, st.config.seed))
    except PlaygroundError as exc:
        return status_html(str(exc), "error"), gr.skip(), gr.skip(), gr.skip()
    grid = pd.concat(frames, ignore_index=True)
    return (status_html(f"Comparison done: {len(pair_names)} pair(s) × {len(drafters)} drafter(s).", "ok"),
            teach.compare_figure(grid), grid.round(3), gr.update(value=grid_csv(grid), interactive=True))


def show_export(pair_name, draft_id, target_id, drafter, k, adaptive, temperature, top_p, max_new_tokens, seed,
                prompt, exit_layer):
    """The Hugging Face generate(...) call and the vLLM config for the current choice."""
    try:
        st = read_settings(pair_name, draft_id, target_id, drafter, k, adaptive, temperature, top_p, max_new_tokens,
                           seed, prompt, exit_layer)
        layer = st.exit_layer
        if st.drafter == session.EARLY_EXIT and layer is None:  # the default needs the target's layer count
            layer = drafters.default_exit_layer(models.load_pair(None, st.target_spec).target)
        draft = st.draft_spec or models.get_pair(pair_name).draft
        hf = export.hf_generate_code(st.target_spec, draft, st.drafter, st.config.k, st.config.adaptive,
                                     st.config.temperature, st.config.top_p, st.config.max_new_tokens, layer, st.prompt)
        vllm = export.vllm_code(st.target_spec, draft, st.drafter, st.config.k, st.config.temperature,
                                st.config.top_p, st.config.max_new_tokens, layer, st.prompt)
    except PlaygroundError as exc:
        return status_html(str(exc), "error"), gr.skip(), gr.skip()
    return status_html("The code for this pair, drafter and k:", "ok"), hf, vllm


# ---------------------------------------------------------------- layout

INTRO = """# Speculative Decoding Playground
A small **draft** proposes *k* tokens; the large **target** checks them all in one forward pass and keeps the
longest prefix it agrees with, then adds one token of its own. The output is exactly what the target alone
would produce (greedy) or follows the same distribution (sampling), in fewer expensive steps."""


def build_demo() -> gr.Blocks:
    """The whole app; launch it with demo.launch(**launch_options())."""
    examples = load_examples()
    catalog = list(models.pairs())
    default = models.default_pair()
    with gr.Blocks(title="Speculative Decoding Playground") as demo:
        state = gr.State(Session)
        gr.Markdown(INTRO, elem_id="intro")
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=300, elem_id="controls"):
                pair = gr.Dropdown(catalog, value=default if default in catalog else catalog[0], label="Model pair", elem_id="pair")
                info = gr.HTML(pair_info(pair.value), elem_id="pair-info")
                with gr.Accordion("Custom models (override the pair)", open=False):
                    draft_id = gr.Textbox(label="Draft model id", placeholder="owner/name or a local folder", elem_id="draft-id")
                    target_id = gr.Textbox(label="Target model id", placeholder="owner/name or a local folder", elem_id="target-id")
                drafter = gr.Radio(list(session.DRAFTERS), value=session.DRAFT_MODEL, label="Drafter", elem_id="drafter",
                                   info="prompt lookup copies n-grams from the prompt; early exit drafts with the "
                                        "target's first layers: neither needs a draft model")
                k = checked_by_us(gr.Slider(engine.K_MIN, engine.K_MAX, value=4, step=1, label="k (draft tokens per round)", elem_id="k"))
                adaptive = gr.Radio(list(K_POLICY_CHOICES), value=FIXED_K, label="k policy", elem_id="adaptive",
                                    info="heuristic: +2 after a fully accepted round, −1 otherwise; theory: the k "
                                         "with the best expected speed for the measured α and costs")
                temperature = checked_by_us(gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)", elem_id="temperature"))
                top_p = checked_by_us(gr.Slider(0.05, 1, value=1, step=0.05, label="Top-p", elem_id="top-p"))
                max_new = checked_by_us(gr.Slider(1, engine.MAX_NEW_TOKENS, value=128, step=1, label="Max new tokens", elem_id="max-new"))
                seed = checked_by_us(gr.Number(0, precision=0, minimum=0, label="Seed", elem_id="seed"))
                exit_layer = checked_by_us(gr.Slider(0, 64, value=0, step=1, label="Early-exit layer L (0 = a quarter of the target's layers)",
                                                     elem_id="exit-layer", info="early exit drafter only"))
            with gr.Column(scale=3, min_width=480):
                prompt = gr.Textbox(label="Prompt", lines=4, max_lines=12, elem_id="prompt",
                                    placeholder="Type a prompt or pick an example below")
                gr.Examples([[e["prompt"]] for e in examples], inputs=[prompt], label="Example prompts",
                            example_labels=[f"{e['category']}: {e['title']}" for e in examples], examples_per_page=12)
                shared = [pair, draft_id, target_id, drafter, k, adaptive, temperature, top_p, max_new, seed, prompt, exit_layer]
                with gr.Tabs():
                    with gr.Tab("Run", id="run"):
                        with gr.Row():
                            run_btn = gr.Button("Generate", variant="primary", elem_id="generate")
                            stop_btn = gr.Button("Stop", variant="stop", elem_id="stop")
                            compare = gr.Checkbox(False, label="Compare with target alone", elem_id="compare-box")
                        status = gr.HTML(status_html("Ready."), elem_id="status")
                        gr.HTML(render.legend(), elem_id="legend")
                        tokens = gr.HTML(render.empty_output(), elem_id="tokens")
                        comparison = gr.HTML("", elem_id="compare")
                        with gr.Row(equal_height=False):
                            summary = gr.Markdown("", elem_id="summary")
                            with gr.Column(scale=0, min_width=200):
                                csv_btn = gr.DownloadButton("Trace as CSV", interactive=False, elem_id="download-csv")
                                json_btn = gr.DownloadButton("Trace as JSON", interactive=False, elem_id="download-json")
                        empty = charts.all_charts(trace.frame([]))
                        with gr.Column(elem_id="charts"):
                            with gr.Row():
                                acc_plot = gr.Plot(empty[0], show_label=False, elem_id="chart-acceptance")
                                lat_plot = gr.Plot(empty[1], show_label=False, elem_id="chart-latency")
                            with gr.Row():
                                hist_plot = gr.Plot(empty[2], show_label=False, elem_id="chart-histogram")
                                pos_plot = gr.Plot(empty[3], show_label=False, elem_id="chart-positions")
                    with gr.Tab("Step through", id="step"):
                        gr.Markdown("One round at a time, with the settings on the left: what the drafter proposed, "
                                    "p (draft) and q (target) for each proposed token and its likeliest alternatives, "
                                    "the verdict, and on a rejection the residual the correction is drawn from.")
                        with gr.Row():
                            step_start_btn = gr.Button("Start step-through", variant="primary", elem_id="step-start")
                            step_next_btn = gr.Button("Next round", elem_id="step-next")
                        step_status = gr.HTML(status_html("Press Start step-through."), elem_id="step-status")
                        step_text = gr.HTML(render.empty_output("The text grows here, round by round."), elem_id="step-text")
                        step_round = gr.HTML("", elem_id="step-round")
                    with gr.Tab("Theory", id="theory"):
                        gr.Markdown("Leviathan et al.'s expected tokens per round (1 − α^(k+1)) / (1 − α) and speedup "
                                    "(1 − α^(k+1)) / ((1 − α)(k c + 1)) for an acceptance rate α and a draft cost c "
                                    "(one draft step / one target step). The diamond is your last run.")
                        with gr.Row():
                            alpha_in = gr.Slider(0, 0.99, value=0.7, step=0.01, label="α (acceptance rate)", elem_id="theory-alpha")
                            c_in = gr.Slider(0, 1, value=0.2, step=0.01, label="c (draft cost per token)", elem_id="theory-c")
                            from_run = gr.Button("Use the last run's α and c", elem_id="theory-from-run")
                        theory_line = gr.Markdown("", elem_id="theory-line")
                        theory_plot = gr.Plot(teach.theory_figure(0.7, 0.2), show_label=False, elem_id="chart-theory")
                    with gr.Tab("Sweep", id="sweep"):
                        gr.Markdown("A grid of k × temperature with the pair and drafter on the left: measured speedup "
                                    "over the target alone and α, beside the theoretical speedup for each cell's measured α and c.")
                        with gr.Row():
                            sweep_ks = gr.Textbox("1 2 4 8", label="k values", elem_id="sweep-ks")
                            sweep_temps = gr.Textbox("0 0.7 1.0", label="Temperatures", elem_id="sweep-temps")
                            sweep_set = gr.Radio([THIS_PROMPT, BUILT_IN], value=THIS_PROMPT, label="Prompts", elem_id="sweep-set")
                        sweep_btn = gr.Button("Run sweep", variant="primary", elem_id="sweep-run")
                        sweep_status = gr.HTML("", elem_id="sweep-status")
                        no_grid = teach.sweep_figures(pd.DataFrame({"method": []}))
                        with gr.Row():
                            sweep_speed = gr.Plot(no_grid[0], show_label=False, elem_id="chart-sweep-speedup")
                            sweep_alpha = gr.Plot(no_grid[1], show_label=False, elem_id="chart-sweep-alpha")
                            sweep_theory = gr.Plot(no_grid[2], show_label=False, elem_id="chart-sweep-theory")
                        sweep_table = gr.Dataframe(elem_id="sweep-table", interactive=False)
                        sweep_csv = gr.DownloadButton("Grid as CSV", interactive=False, elem_id="sweep-csv")
                    with gr.Tab("Compare pairs", id="pairs"):
                        gr.Markdown("Several pairs and drafters on the same prompt and settings (k, policy, temperature, "
                                    "max new tokens, seed on the left), each against its own target alone.")
                        cmp_pairs = gr.CheckboxGroup(catalog, value=[pair.value], label="Pairs", elem_id="cmp-pairs")
                        cmp_drafters = gr.CheckboxGroup(list(session.DRAFTERS), value=[session.DRAFT_MODEL, session.PROMPT_LOOKUP],
                                                        label="Drafters", elem_id="cmp-drafters")
                        cmp_btn = gr.Button("Compare", variant="primary", elem_id="cmp-run")
                        cmp_status = gr.HTML("", elem_id="cmp-status")
                        cmp_plot = gr.Plot(teach.compare_figure(pd.DataFrame({"method": []})), show_label=False,
                                           elem_id="chart-compare")
                        cmp_table = gr.Dataframe(elem_id="cmp-table", interactive=False)
                        cmp_csv = gr.DownloadButton("Comparison as CSV", interactive=False, elem_id="cmp-csv")
                    with gr.Tab("Export", id="export"):
                        gr.Markdown("The same choice of pair, drafter and k as a Hugging Face `generate(...)` call and a "
                                    "vLLM `speculative_config`, to take to production.")
                        export_btn = gr.Button("Show the code", variant="primary", elem_id="export-run")
                        export_status = gr.HTML("", elem_id="export-status")
                        export_hf = gr.Code(language="python", label="transformers", elem_id="export-hf")
                        export_vllm = gr.Code(language="python", label="vLLM", elem_id="export-vllm")

        outputs = [status, tokens, comparison, summary, acc_plot, lat_plot, hist_plot, pos_plot, csv_btn, json_btn]
        inputs = shared[:-1] + [compare, exit_layer, state]
        pair.change(pair_info, inputs=pair, outputs=info, show_progress="hidden", concurrency_limit=None)
        running = run_btn.click(gpu(generate), inputs=inputs, outputs=outputs, show_progress="minimal",
                                show_progress_on=[status], api_name="generate")
        stop_btn.click(stop, inputs=state, outputs=outputs, cancels=[running], show_progress="hidden",
                       concurrency_limit=None, api_name="stop")
        step_outputs = [step_status, step_text, step_round]
        step_start_btn.click(gpu(step_start), inputs=shared + [state], outputs=step_outputs, api_name="step_start")
        step_next_btn.click(gpu(step_next), inputs=state, outputs=step_outputs, api_name="step_next")
        for trigger in (alpha_in.release, c_in.release):
            trigger(theory_view, inputs=[alpha_in, c_in, state], outputs=[theory_plot, theory_line],
                    concurrency_limit=None, show_progress="hidden")
        from_run.click(theory_from_run, inputs=state, outputs=[alpha_in, c_in], concurrency_limit=None).then(
            theory_view, inputs=[alpha_in, c_in, state], outputs=[theory_plot, theory_line], concurrency_limit=None)
        sweep_btn.click(gpu(run_sweep), inputs=shared + [sweep_ks, sweep_temps, sweep_set],
                        outputs=[sweep_status, sweep_speed, sweep_alpha, sweep_theory, sweep_table, sweep_csv],
                        api_name="sweep", show_progress_on=[sweep_status])
        cmp_btn.click(gpu(run_compare), inputs=[cmp_pairs, cmp_drafters] + shared[4:],
                      outputs=[cmp_status, cmp_plot, cmp_table, cmp_csv], api_name="compare", show_progress_on=[cmp_status])
        export_btn.click(show_export, inputs=shared, outputs=[export_status, export_hf, export_vllm],
                         api_name="export", concurrency_limit=None)
    demo.queue(default_concurrency_limit=1, max_size=32)
    return demo


def launch_options() -> dict:
    """Gradio 6 takes the theme and the CSS at launch()."""
    return {"css_paths": [CSS_FILE], "theme": gr.themes.Soft(primary_hue="blue", neutral_hue="slate")}
