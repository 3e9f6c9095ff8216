"""The page, top to bottom: the intro, the shared controls on the left, the prompt and the tabs on
the right. Each tab's widgets and events live in its own module; this one only places them and
hands every callback the one Runner of the app."""

from __future__ import annotations

import html

import gradio as gr

from playground import models
from playground.env import settings
from playground.run.runner import Runner
from playground.run.startup import Startup
from playground.core.config import (
    DecodeConfig,
    KPolicy,
    K_MAX,
    K_MIN,
    Precision,
    TARGET_PRECISIONS,
)
from playground.run.spec import DEFAULT_PRECISION, DrafterSpec
from playground import decoding
from playground.decoding import DRAFTERS
from playground.core.errors import shown
from playground.ui import (
    challenges_tab,
    compare_tab,
    export_tab,
    fair_queue,
    jobs,
    links,
    recorded_runs,
    run_tab,
    sessions,
    step_tab,
    sweep_tab,
    theory_tab,
    uploads,
)
from playground.ui.common import (
    ASSETS,
    OPTION_DEFAULTS,
    Controls,
    checked_by_us,
    load_examples,
    pair_drafter,
    pair_info,
    precision_choices,
    status_html,
)
from playground.ui.state import SessionState

CSS_FILE = ASSETS / "style.css"
MAX_FILE_SIZE = uploads.MAX_FILE_SIZE  # Gradio's own size check, which never refuses first (the app's message)
DRAFT_PRECISIONS = (Precision.FP32, Precision.BF16, Precision.INT8, Precision.INT4)

INTRO = """# Speculative Decoding Playground
A small **draft** proposes *k* tokens; the large **target** checks them all in one forward pass and keeps the
longest prefix it agrees with, then adds one token of its own. The output is exactly what the target alone
would produce (greedy) or follows the same distribution (sampling), in fewer expensive steps."""

POLICY_INFO = (
    "fixed: k every round; heuristic: +2 after a fully accepted round, −1 otherwise; theory: the k with the "
    "best expected speed for the α measured so far and the cost profile measured at the start of the run "
    "(fixed for the run, so a seed reproduces it); draft confidence: a draft of at most k stops once the "
    "draft's top probability falls under the threshold below"
)
DRAFTER_INFO = (
    "prompt lookup copies n-grams from the prompt; early exit drafts with the target's first layers; self int4: "
    "the same model with cheaper numbers (its own int4 copy) drafts for itself: none needs a draft model; staged: prompt lookup drafts for the draft model, which keeps what it would have "
    "drafted itself; suffix decoding drafts what followed the same text before (a suffix tree of the "
    "prompt and the output); lookahead decoding lets the target guess ahead in its own pass (a Jacobi "
    "window) and verifies the n-grams it produced: neither needs a draft model"
)
TREE_INFO = (
    "draft a tree of continuations instead of a chain; the target scores all its nodes in one pass and keeps "
    "the longest path it agrees with. '3-2-1-1': children per depth (3 at the root, 2 under each of those, …); "
    "'dynamic:16': 16 nodes spent where the draft is most confident; 'sized:16' (or 'sized'): each round the tree "
    "with the most expected tokens per unit of time, from the measured pass costs and this run's acceptance "
    "(Sequoia), at most 16 nodes; 'confidence:16' (or 'confidence'): grown by the draft's path probabilities while "
    "a node pays for its rows under this run's costs, a chain where the draft is sure (EAGLE-2), at most 16 nodes. "
    "Draft model, early exit, self int4 and suffix decoding; the tree's depth replaces k"
)
INVARIANT_INFO = (
    "bf16 on this CPU: the target's kernels give a position the same logits whether its pass holds 1 token "
    "or k + 1, so greedy output is exactly the target's; untick for torch's own kernels and watch "
    "near-ties flip (the lesson of finite precision). No effect in fp32 or where the kernels cannot run."
)


def build_demo(runner: Runner | None = None, startup: Startup | None = None) -> gr.Blocks:
    """The whole app; launch it with demo.launch(**launch_options()). With a Startup (app.py's, begun at launch),
    the Run tab shows its progress and Generate waits for what it still prepares."""
    jobs.check_gradio()  # the queue rules read Gradio's internals: only on the Gradio they were written for
    settings.read()  # every PLAYGROUND_* value checked once at start-up: a bad one stops the app, naming it
    runner = runner or Runner()  # the one runner: loads, warms up once per model and drafter, profiles, runs
    catalog = list(models.pairs())
    # Gradio's cache (its copies, uploads) is cleaned of files older than a session's idle time, every 5 minutes;
    # sessions themselves, their download folders and expired uploads go sooner (ui/sessions.py)
    cache = (300, settings.read().session_idle_s + 300)
    with gr.Blocks(title="Speculative Decoding Playground", delete_cache=cache) as demo:
        state = gr.State(sessions.new_session, delete_callback=SessionState.close)
        with gr.Row(equal_height=False):
            gr.Markdown(INTRO, elem_id="intro")
            with gr.Column(scale=0, min_width=200):
                projector = gr.Checkbox(False, label="Projector mode (large text)", elem_id="projector")
                # the controls' help texts are folded (an (i) after a label shows its text on hover); this box
                # unfolds them all: CSS alone (assets/style.css, "The sidebar"), no event
                gr.Checkbox(False, label="Show the controls' help", elem_id="help-toggle")
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=300, elem_id="controls"):
                models_, info = _model_controls(catalog)
                left = models_ | _drafter_controls() | _decoding_controls()
            with gr.Column(scale=3, min_width=480):
                controls = Controls.named(**left, prompt=_prompt_box())
                for choice in (
                    controls.pair,
                    controls.target_precision,
                    controls.drafter,
                    controls.draft_precision,
                    controls.policy,
                ):
                    checked_by_us(choice)  # the spec names the field of an unlisted value (the sliders are above)
                run_outputs, compare = _tabs(runner, controls, state, catalog, startup)
        controls.pair.change(
            pair_info,
            inputs=controls.pair,
            outputs=info,
            show_progress="hidden",
            concurrency_limit=None,
            api_visibility="undocumented",
        )
        controls.pair.change(
            pair_drafter,
            inputs=[controls.pair, controls.drafter],
            outputs=controls.drafter,
            show_progress="hidden",
            concurrency_limit=None,
            api_visibility="undocumented",
        )  # a cross-tokenizer pair picks its drafter
        projector.change(None, inputs=projector, js=PROJECTOR_JS, api_visibility="private")

        # the page's link sets the controls (?k=4&policy=theory ..., ?run=story): links.py, recorded_runs.py
        def on_load(session: SessionState | None, request: gr.Request) -> list:
            return first_view(session, request, len(run_outputs))

        demo.load(
            on_load,
            inputs=state,
            outputs=run_outputs + controls.as_inputs() + [compare, projector],
            show_progress="hidden",
            api_visibility="private",
        )
    # api_open=False: Gradio's direct routes (POST /gradio_api/run/<api>, /api/<api>) would run an event outside the
    # queue and its caps; they now refuse every queued event, and /call/<api> joins the queue like the page
    demo.queue(default_concurrency_limit=1, max_size=settings.QUEUE_SIZE, api_open=False)
    uploads.answer_forged_paths(demo)  # a forged upload path gets the Run tab's own message
    fair_queue.settle_holds(demo._queue)  # a place held while a job joins ends once it has joined
    return demo


def _model_controls(catalog: list[str]) -> tuple[dict, gr.HTML]:
    """The pair, its models shown under it, the custom model ids, the target's precision."""
    default = models.default_pair()
    pair = gr.Dropdown(catalog, value=default if default in catalog else catalog[0], label="Model pair", elem_id="pair")
    info = gr.HTML(pair_info(pair.value), elem_id="pair-info")
    with gr.Accordion("Custom models (override the pair)", open=False):
        draft_id = gr.Textbox(label="Draft model id", placeholder="owner/name or a local folder", elem_id="draft-id")
        target_id = gr.Textbox(label="Target model id", placeholder="owner/name or a local folder", elem_id="target-id")
    target_precision = gr.Dropdown(
        precision_choices(models.default_target_precision().value, tuple(p.value for p in TARGET_PRECISIONS)),
        value=DEFAULT_PRECISION,
        label="Target precision",
        elem_id="target-precision",
    )
    invariant = gr.Checkbox(
        settings.read().invariant,
        label="Exact numerics (batch-invariant kernels)",
        elem_id="invariant",
        info=INVARIANT_INFO,
    )
    return dict(
        pair=pair, draft_id=draft_id, target_id=target_id, target_precision=target_precision, invariant=invariant
    ), info


def _drafter_controls() -> dict:
    """The drafter and its options: the draft's precision (three drafters share it) in a row with the strategies' own
    widgets that have no note (decoding/strategies/: WIDGETS; the draft's vocabulary, the lookup's n-gram size, the
    early-exit layer: CSS shows those the chosen drafter uses), the rest in an accordion."""
    drafter = gr.Radio(
        [d.value for d in DRAFTERS],
        value=DrafterSpec().kind.value,  # the default drafter, chosen once (spec.DrafterSpec)
        label="Drafter",
        elem_id="drafter",
        info=DRAFTER_INFO,
    )
    with gr.Row(equal_height=True, elem_id="drafter-options"):
        draft_precision = gr.Dropdown(  # half the row: "int4 (default)" shows whole; the kernels are not built for it
            precision_choices(
                models.default_draft_precision(build=False).value, tuple(p.value for p in DRAFT_PRECISIONS)
            ),
            value=DEFAULT_PRECISION,
            label="Draft precision",
            elem_id="draft-precision",
            info="draft model drafter only; int4 and int8 on CPU",
            min_width=120,
        )
        out = _option_controls(noted=False)
    return dict(drafter=drafter, draft_precision=draft_precision) | out | _option_controls(noted=True)


def _option_controls(noted: bool) -> dict:
    """The strategies' own options, built from their WIDGETS (their Options hold the defaults and check the values),
    each once (staged drafting's n-gram size is prompt lookup's control): a strategy's widgets in the open
    (noted=False), or, where it has a note (Strategy.about: suffix, lookahead, self int4), under that note in the
    accordion."""
    strategies = [decoding.strategy(kind) for kind in DRAFTERS]
    if not noted:
        return {w.name: _widget(w) for w in _once(w for s in strategies if not s.about for w in s.widgets)}
    out = {}
    with gr.Accordion("Suffix, lookahead decoding and self int4 options", open=False, elem_id="draftfree-options"):
        for s in (s for s in strategies if s.about):
            gr.Markdown(s.about)
            out |= {w.name: _widget(w) for w in s.widgets}
    return out


def _once(widgets) -> list[decoding.Widget]:
    """Each widget's first, by name (a strategy may share another's: staged, prompt lookup's n-gram size)."""
    first: dict[str, decoding.Widget] = {}
    for w in widgets:
        first.setdefault(w.name, w)
    return list(first.values())


def _widget(w: decoding.Widget) -> gr.components.Component:
    """A checkbox for a flag, else a slider (or a number box); its value the Options' default
    (common.OPTION_DEFAULTS)."""
    elem_id, value, info = w.name.replace("_", "-"), OPTION_DEFAULTS[w.name], w.help or None
    if isinstance(value, bool):
        return gr.Checkbox(value, label=w.label, elem_id=elem_id, info=info)
    given = dict(value=value, step=w.step, label=w.label, elem_id=elem_id, info=info, min_width=100)
    if w.box:
        return checked_by_us(gr.Number(minimum=w.low, maximum=w.high, precision=0, **given))
    return checked_by_us(gr.Slider(w.low, w.high, **given))


def _decoding_controls() -> dict:
    """k, the token tree, the k policy and its threshold, the temperature, the token limit; top-p and the seed side
    by side (a row of their own, so that the sidebar fits one screen). Each starts at DecodeConfig's default."""
    d = DecodeConfig.within_limit(settings.read().max_new_tokens)
    out = dict(
        k=checked_by_us(gr.Slider(K_MIN, K_MAX, value=d.k, step=1, label="k (draft tokens per round)", elem_id="k")),
        tree=gr.Textbox(
            d.tree.label if d.tree else "",
            label="Token tree",
            placeholder="empty = a chain of k tokens",
            elem_id="tree-shape",
            max_lines=1,
            info=TREE_INFO,
        ),
        policy=gr.Radio(
            [p.label for p in KPolicy],
            value=d.policy.label,
            label="k policy",
            elem_id="adaptive",
            info=POLICY_INFO,
        ),
        confidence=checked_by_us(
            gr.Slider(
                0,
                0.95,
                value=d.confidence,
                step=0.05,
                elem_id="confidence",
                label="Confidence threshold",
                info="the 'adaptive (draft confidence)' k policy only: a draft "
                "stops once the draft's top probability falls under it",
            )
        ),
        temperature=checked_by_us(
            gr.Slider(0, 2, value=d.temperature, step=0.05, label="Temperature (0 = greedy)", elem_id="temperature")
        ),
        max_new_tokens=checked_by_us(
            gr.Slider(
                1,
                settings.read().max_new_tokens,
                value=d.max_new_tokens,
                step=1,
                label="Max new tokens",
                elem_id="max-new",
            )
        ),
    )
    with gr.Row(equal_height=True):
        out["top_p"] = checked_by_us(
            gr.Slider(0.05, 1, value=d.top_p, step=0.05, label="Top-p", elem_id="top-p", scale=2)
        )
        out["seed"] = checked_by_us(
            gr.Number(d.seed, precision=0, minimum=0, label="Seed", elem_id="seed", min_width=80)
        )
    return out


def _prompt_box() -> gr.Textbox:
    """The prompt, holding the first example prompt, with every example under it."""
    examples = load_examples()
    prompt = gr.Textbox(
        examples[0]["prompt"],
        label="Prompt",
        lines=4,
        max_lines=12,
        elem_id="prompt",
        placeholder="Type a prompt or pick an example below",
    )
    checked_by_us(prompt)  # Gradio's Textbox makes text of a list, a dict or a number: the spec refuses them
    gr.Examples(
        [[e["prompt"]] for e in examples],
        inputs=[prompt],
        label="Example prompts",
        example_labels=[f"{e['category']}: {e['title']}" for e in examples],
        examples_per_page=12,
    )
    return prompt


PROJECTOR_JS = "(on) => { document.documentElement.classList.toggle('projector', !!on); }"


def first_view(session: SessionState | None, request: gr.Request | None, n_view: int) -> list:
    """What the page's link asks for: a recorded run of the gallery (?run=story), then the controls it sets; a
    value that is unknown or out of range is left out, with a note in the status line (never an error page)."""
    params = dict(request.query_params) if request is not None else {}
    values, flags, notes = links.read_settings(params)
    view: list = [gr.skip()] * n_view
    run = params.get("run")
    if run is not None:
        if run in dict(recorded_runs.gallery()):
            shown_view, run_values, _ = recorded_runs.open_run(
                recorded_runs.read_bounded(recorded_runs.RUNS / f"{run}.json"), session, f"gallery: {run}"
            )
            view = list(shown_view)
            values = run_values | values
            flags.setdefault("compare", bool(session is not None and session.run and session.run.baseline))
        else:
            notes.append(
                f"run={shown(run)} is not one of the gallery's runs ({', '.join(dict(recorded_runs.gallery()))})"
            )
    if notes:
        message = links.settings_note(notes)
        shown_status = view[0] if isinstance(view[0], str) else ""
        view[0] = (
            shown_status.replace("</div>", html.escape(" " + message) + "</div>", 1)
            if shown_status
            else status_html(message, "info")
        )
    return view + links.control_updates(values) + [flags.get("compare", gr.skip()), flags.get("projector", gr.skip())]


def _tabs(
    runner: Runner, controls: Controls, state: gr.State, catalog: list[str], startup: Startup | None
) -> tuple[list, gr.Checkbox]:
    with gr.Tabs():
        with gr.Tab("Run", id="run"):
            run_outputs, compare = run_tab.build(runner, controls, state, startup)
        with gr.Tab("Step through", id="step"):
            step_tab.build(runner, controls, state)
        with gr.Tab("Theory", id="theory"):
            theory_tab.build(state)
        with gr.Tab("Sweep", id="sweep"):
            sweep_tab.build(runner, controls, state)
        with gr.Tab("Compare pairs", id="pairs"):
            compare_tab.build(runner, controls, state, catalog)
        with gr.Tab("Challenges", id="challenges"):
            challenges_tab.build(runner, controls, state)
        with gr.Tab("Export", id="export"):
            export_tab.build(runner, controls, compare)
    return run_outputs, compare


def launch_options() -> dict:
    """Gradio 6 takes the theme and the CSS at launch(); uploads are small and bounded per address, and sessions
    expire (sessions.launch_kwargs: the reaper and the upload limit)."""
    return {
        "css_paths": [CSS_FILE],
        "theme": gr.themes.Soft(primary_hue="blue", neutral_hue="slate"),
        "max_file_size": MAX_FILE_SIZE,
        "js": recorded_runs.SIZE_CHECK_JS,  # a trace over the limit is not sent, and the status line says so
        **sessions.launch_kwargs(),
    }
