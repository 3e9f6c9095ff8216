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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

import gradio as gr

from playground import charts, engine, models, render, session, trace
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
    """Per-browser-session value of the gr.State: the latest run."""

    def __init__(self) -> None:
        self.current: Run | None = None


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


def check_prompt(prompt: Any) -> str:
    if not isinstance(prompt, str) or not prompt.strip():
        raise PlaygroundError("The prompt is empty: type something to continue.")
    return prompt


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

def generate(pair_name: str, draft_id: str, target_id: str, drafter: str, k: float, adaptive: str | bool,
             temperature: float, top_p: float, max_new_tokens: float, seed: float, prompt: str,
             compare: bool, state: Session | None, progress: gr.Progress = gr.Progress()) -> Iterator[View]:
    """Load (cached), run the speculative decoder round by round, optionally the target alone; stream it all."""
    try:
        policy = K_POLICY_CHOICES.get(adaptive, adaptive) if isinstance(adaptive, str) else ("heuristic" if adaptive else "fixed")
        if policy not in ("fixed",) + engine.K_POLICIES:
            raise PlaygroundError(f"Unknown k policy {adaptive!r}; choose one of: {', '.join(K_POLICY_CHOICES)}.")
        config = DecodeConfig(max_new_tokens=max_new_tokens, k=k, adaptive=policy != "fixed",
                              policy=policy if policy != "fixed" else "heuristic",
                              temperature=temperature, top_p=top_p, seed=seed)
        config.validate()
        check_prompt(prompt)
        draft_spec, target_spec = model_specs(pair_name, draft_id, target_id, drafter)
        loading = f"Loading {target_spec}" + (f" and {draft_spec}" if draft_spec else "") + " …"
        yield unchanged(status=status_html(loading, "busy"), tokens=render.empty_output("Waiting for the first round …"),
                        compare="", summary="", csv=gr.update(value=None, interactive=False),
                        json=gr.update(value=None, interactive=False))
        meta = {"pair": pair_name, "draft": draft_spec, "target": target_spec, "drafter": drafter, "config": asdict(config)}
        run = Run(prompt=prompt, meta=meta, comparing=bool(compare))
        if state is not None:
            state.current = run  # from now on Stop finds this run
        pair = models.load_pair(draft_spec, target_spec, progress=lambda msg, f: progress(f, desc=msg))
        run.tokenizer = pair.tokenizer
        if run.stopped:
            return
        with pair.in_use():  # the model cache never evicts a pair while it generates
            yield from _stream(run, pair, drafter, config, run.rounds, "Speculative")
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
        line = str(exc).splitlines()[0] if str(exc) else ""
        yield unchanged(status=status_html(f"Something went wrong: {type(exc).__name__}: {line}", "error"))


def _stream(run: Run, pair: models.LoadedPair, drafter: str, config: DecodeConfig, into: list[RoundRecord],
            label: str, baseline: bool = False) -> Iterator[View]:
    """Iterate one decoder and show each round as it comes: the speculative run in the token box
    (with the charts every CHART_EVERY_S), the target-alone run in the comparison panel."""
    decoder = session.decoder(pair, drafter, run.prompt, config)
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
                                   info="prompt lookup copies n-grams from the prompt: no draft model")
                k = checked_by_us(gr.Slider(engine.K_MIN, engine.K_MAX, value=4, step=1, label="k (draft tokens per round)", elem_id="k"))
                adaptive = gr.Radio(list(K_POLICY_CHOICES), value=FIXED_K, label="k policy", elem_id="adaptive",
                                    info="heuristic: +2 after a fully accepted round, −1 otherwise; theory: the k "
                                         "with the best expected speed for the measured α and costs")
                temperature = checked_by_us(gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)", elem_id="temperature"))
                top_p = checked_by_us(gr.Slider(0.05, 1, value=1, step=0.05, label="Top-p", elem_id="top-p"))
                max_new = checked_by_us(gr.Slider(1, engine.MAX_NEW_TOKENS, value=128, step=1, label="Max new tokens", elem_id="max-new"))
                seed = checked_by_us(gr.Number(0, precision=0, minimum=0, label="Seed", elem_id="seed"))
                compare = gr.Checkbox(False, label="Compare with target alone", elem_id="compare-box")
            with gr.Column(scale=3, min_width=480):
                prompt = gr.Textbox(label="Prompt", lines=4, max_lines=12, elem_id="prompt",
                                    placeholder="Type a prompt or pick an example below")
                gr.Examples([[e["prompt"]] for e in examples], inputs=[prompt], label="Example prompts",
                            example_labels=[f"{e['category']}: {e['title']}" for e in examples], examples_per_page=12)
                with gr.Row():
                    run_btn = gr.Button("Generate", variant="primary", elem_id="generate")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop")
                status = gr.HTML(status_html("Ready."), elem_id="status")
                gr.HTML(render.legend(), elem_id="legend")
                tokens = gr.HTML(render.empty_output(), elem_id="tokens")
                comparison = gr.HTML("", elem_id="compare")
                with gr.Row(equal_height=False):
                    summary = gr.Markdown("", elem_id="summary")
                    with gr.Column(scale=0, min_width=200):
                        csv_btn = gr.DownloadButton("Trace as CSV", interactive=False, elem_id="download-csv")
                        json_btn = gr.DownloadButton("Trace as JSON", interactive=False, elem_id="download-json")
        with gr.Column(elem_id="charts"):
            empty = charts.all_charts(trace.frame([]))
            with gr.Row():
                acc_plot = gr.Plot(empty[0], show_label=False, elem_id="chart-acceptance")
                lat_plot = gr.Plot(empty[1], show_label=False, elem_id="chart-latency")
            with gr.Row():
                hist_plot = gr.Plot(empty[2], show_label=False, elem_id="chart-histogram")
                pos_plot = gr.Plot(empty[3], show_label=False, elem_id="chart-positions")

        outputs = [status, tokens, comparison, summary, acc_plot, lat_plot, hist_plot, pos_plot, csv_btn, json_btn]
        inputs = [pair, draft_id, target_id, drafter, k, adaptive, temperature, top_p, max_new, seed, prompt, compare, state]
        pair.change(pair_info, inputs=pair, outputs=info, show_progress="hidden", concurrency_limit=None)
        running = run_btn.click(gpu(generate), inputs=inputs, outputs=outputs, show_progress="minimal",
                                show_progress_on=[status])
        stop_btn.click(stop, inputs=state, outputs=outputs, cancels=[running], show_progress="hidden", concurrency_limit=None)
    demo.queue(default_concurrency_limit=1, max_size=32)
    return demo


def launch_options() -> dict:
    """Gradio 6 takes the theme and the CSS at launch()."""
    return {"css_paths": [CSS_FILE], "theme": gr.themes.Soft(primary_hue="blue", neutral_hue="slate")}
