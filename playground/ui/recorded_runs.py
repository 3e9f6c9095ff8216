"""Recorded runs on the Run tab: open a trace JSON (the tab's own download) or a run of the gallery in assets/runs/,
and show it as if it had just run: the tokens with their hovers, the charts, the summary, the comparison and the
race. No model is loaded: the trace carries the token texts (playground.run.recorded). A bad file changes nothing but
the status line, which says what is wrong with it."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import gradio as gr

from playground import decoding, models
from playground.run import recorded
from playground.run.spec import RunSpec
from playground.ui.common import ASSETS, Controls, View, status_html, unchanged, unexpected
from playground.ui import sessions, uploads
from playground.ui.links import control_updates
from playground.ui.run_view import final_view, memory_again
from playground.ui.state import CurrentRun, SessionState

RUNS = ASSETS / "runs"
# The gallery: (name, the button's label); the run is assets/runs/<name>.json.
GALLERY = (
    ("code", "Default pair · code"),
    ("story", "Default pair · story, with the target alone"),
    ("cross", "Cross-tokenizer pair"),
    ("tree", "Token tree"),
)


def gallery() -> list[tuple[str, str]]:
    """The gallery's runs that are there."""
    return [(name, label) for name, label in GALLERY if (RUNS / f"{name}.json").is_file()]


def read_bounded(path: str | Path) -> bytes:
    """At most one byte more than a recorded run may have (recorded.read then says it is too large)."""
    with open(path, "rb") as f:
        return f.read(recorded.MAX_BYTES + 1)


def open_run(data: bytes, state: SessionState | None, source: str) -> tuple[View, dict[str, Any], list[str]]:
    """A trace's bytes -> (the Run tab's view of it, the controls' values it ran with, notes). A bad file: the status
    says why and nothing else changes (the controls neither)."""
    try:
        rec = recorded.read(data)
        run = CurrentRun(
            rec.spec,
            comparing=bool(rec.baseline),
            tokenizer=rec.tokenizer,
            target_precision=rec.target_precision,
            draft_precision=rec.draft_precision,
            invariant=bool(rec.spec.pair.invariant),
            profile=rec.profile,
            rounds=rec.rounds,
            baseline=rec.baseline,
            segments=rec.segments,
            prompt_tokens=rec.prompt_tokens,
            finished=True,
        )
        state = state if state is not None else SessionState()
        s = run.summary()
        when = f", recorded {rec.recorded_at}" if rec.recorded_at else ""
        message = (
            f"Recorded run ({source}{when}): {rec.spec.pair.name}, {rec.spec.drafter.label}, {s['tokens']} "
            f"tokens in {s['rounds']} rounds. Shown from the file: no model was loaded."
        )
        view = final_view(run, state, message, "ok")
    except recorded.BadRecording as exc:
        return unchanged(status=status_html(f"{source}: {exc} Nothing else was changed.", "error")), {}, []
    except Exception as exc:  # rounds that do not fit together in a way the checks missed: say so, change nothing
        return unchanged(status=unexpected(exc)), {}, []
    if state.run is not None and not state.run.finished:
        state.run.stopped = True  # a live run of this session ends: the page now shows the recorded one
    state.run = run
    state.charge("run")  # counted now that it is the session's run (final_view counted it before)
    view = memory_again(view, state)
    values, notes = controls_of(rec.spec)
    if notes:
        view = view._replace(status=view.status.replace("</div>", html.escape(" " + " ".join(notes)) + "</div>", 1))
    return view, values, notes


def controls_of(spec: RunSpec) -> tuple[dict[str, Any], list[str]]:
    """The shared controls' values a recorded run ran with (Generate then runs it again), and notes."""
    d = spec.decode
    values: dict[str, Any] = dict(
        drafter=spec.drafter.kind.value,
        k=d.k,
        tree=d.tree.label if d.tree else "",
        policy=d.policy.label,
        confidence=d.confidence,
        temperature=d.temperature,
        top_p=d.top_p,
        max_new_tokens=d.max_new_tokens,
        seed=d.seed,
        prompt=spec.prompt,
        target_precision=spec.pair.target_precision.value if spec.pair.target_precision else "default",
        draft_precision=spec.drafter.precision.value if spec.drafter.precision else "default",
    )
    options = spec.drafter.options  # its strategy's own options that the page shows (decoding/strategies/: WIDGETS)
    values |= {w.name: w.shown(getattr(options, w.name)) for w in decoding.strategy(spec.drafter.kind).widgets}
    if spec.pair.invariant is not None:
        values["invariant"] = spec.pair.invariant
    notes = []
    if spec.pair.name in models.pairs():
        values["pair"] = spec.pair.name
    else:
        notes.append("Its pair is not one of this server's: the pair control stays as it was.")
    return values, notes


# The page's own size check (launch's js, ui/layout.py): Gradio's refused a file over its max_file_size with a
# toast alone and the status line stayed as it was. A file over the limit is now not sent, and the hidden button's
# event (its js hands it the size) says so in the status line; Gradio's handler (a toast) never sees the file.
SIZE_CHECK_JS = (
    """() => {
  if (window.playgroundSizeCheck) return;
  window.playgroundSizeCheck = true;
  document.addEventListener("change", (event) => {
    const input = event.target;
    if (!(input instanceof HTMLInputElement) || input.type !== "file") return;
    if (!input.parentElement || !input.parentElement.querySelector("#open-run")) return;
    const size = Math.max(0, ...Array.from(input.files || [], (file) => file.size));
    if (size <= %d) return;
    event.stopImmediatePropagation();
    input.value = "";
    window.playgroundTooLarge = size;
    document.querySelector("#open-run-too-large")?.click();
  }, true);
}"""
    % recorded.MAX_BYTES
)
TOO_LARGE_JS = "(label) => [String(window.playgroundTooLarge || '')]"


def layout() -> tuple[gr.UploadButton, gr.Button, list[tuple[str, gr.Button]]]:
    """The 'Recorded runs' row of the Run tab (drawn inside it): an upload button, the hidden button that says a file
    was too large to send (SIZE_CHECK_JS), and one button per gallery run."""
    with gr.Row(elem_id="recorded-runs"):
        gr.HTML('<span class="recorded-label">Recorded runs, shown at once with no model:</span>', padding=False)
        upload = gr.UploadButton(
            "Open a trace JSON …", file_types=[".json"], type="filepath", size="sm", elem_id="open-run"
        )
        uploads.no_stray_file(upload)  # Gradio's own left an empty file in its cache for every upload event
        too_large = gr.Button("", visible="hidden", elem_id="open-run-too-large")
        buttons = [(name, gr.Button(label, size="sm", elem_id=f"gallery-{name}")) for name, label in gallery()]
    return upload, too_large, buttons


def wire(
    upload: gr.UploadButton,
    too_large: gr.Button,
    buttons: list[tuple[str, gr.Button]],
    controls: Controls,
    state: gr.State,
    compare: gr.Checkbox,
    outputs: list,
) -> None:
    """Their events: the Run tab's outputs, then the shared controls and the comparison box."""
    targets = outputs + controls.as_inputs() + [compare]
    nothing = [gr.skip()] * (len(targets) - len(View._fields))

    def show(data: bytes, session: SessionState | None, source: str) -> list:
        view, values, _ = open_run(data, session, source)
        if not values:
            return list(view) + nothing
        return (
            list(view)
            + control_updates(values)
            + [bool(session.run.baseline) if session and session.run else gr.skip()]
        )

    def on_upload(value: Any, session: SessionState | None, request: gr.Request = None) -> list:
        # a path: the upload's, or uploads.FORGED for one Gradio refused (/etc/passwd, ../, a URL), which take_upload
        # refuses with this tab's message rather than Gradio's bare {"error": null}
        path = value.get("path") if isinstance(value, dict) else value
        if not path:
            return list(unchanged()) + nothing
        if not isinstance(path, str) or len(path) > 4096:
            path = "/"  # not a path: refused below like any file this page did not upload
        try:
            data = sessions.take_upload(path, request)  # this page's upload only; read once, then removed
        except PermissionError as exc:
            return list(unchanged(status=status_html(f"{exc} Nothing else was changed.", "error"))) + nothing
        except OSError as exc:
            return list(unchanged(status=unexpected(exc))) + nothing
        return show(data, session, "the file")

    on_upload.takes_upload = True  # a path Gradio refuses comes here as uploads.FORGED (uploads.answer_forged_paths)
    upload.upload(
        on_upload,
        inputs=[upload, state],
        outputs=targets,
        concurrency_limit=None,
        show_progress="hidden",
        api_visibility="undocumented",
    )

    def on_too_large(size: Any) -> list:
        # the size of the file the page did not send (SIZE_CHECK_JS): digits, or the message names the limit alone
        text = str(size) if isinstance(size, (str, int)) else ""
        count = int(text) if re.fullmatch(r"[0-9]{1,15}", text) else 0
        message = recorded.too_large(count if count > recorded.MAX_BYTES else None)
        note = "It was not sent. Nothing else was changed."
        return list(unchanged(status=status_html(f"{message} {note}", "error"))) + nothing

    too_large.click(
        on_too_large,
        inputs=too_large,
        outputs=targets,
        js=TOO_LARGE_JS,
        concurrency_limit=None,
        show_progress="hidden",
        api_visibility="private",
    )
    for name, button in buttons:
        button.click(
            lambda session, name=name: show(read_bounded(RUNS / f"{name}.json"), session, f"gallery: {name}"),
            inputs=state,
            outputs=targets,
            concurrency_limit=None,
            show_progress="hidden",
            api_name=f"gallery_{name}",
        )
