"""UI callbacks called directly: clear messages for bad input, a full run, Stop, downloads."""
from __future__ import annotations

import json
from pathlib import Path

import gradio as gr

from playground import models, session, ui

SKIP = gr.skip()
PAIR = "tiny (test)"




def call(prompt="Once upon a time", draft_id="", target_id="", drafter=session.DRAFT_MODEL, k=4, adaptive=False,
         temperature=0.0, top_p=1.0, max_new=12, seed=0, compare=False, pair=PAIR, state=None, exit_layer=0) -> list[ui.View]:
    return list(ui.generate(pair, draft_id, target_id, drafter, k, adaptive, temperature, top_p, max_new, seed,
                            prompt, compare, exit_layer, state if state is not None else ui.Session()))


def only_status(views: list[ui.View]) -> str:
    """The one view of a refused run: a status message, every other output unchanged."""
    assert len(views) == 1
    (view,) = views
    assert all(getattr(view, f) == SKIP for f in ui.View._fields if f != "status")
    assert "status-error" in view.status and "Traceback" not in view.status
    return view.status


def test_empty_prompt(tiny_catalog):
    assert "The prompt is empty" in only_status(call(prompt="   "))


def test_bad_custom_id(tiny_catalog):
    message = only_status(call(draft_id="../../etc"))
    assert "allowed model roots" in message and "&#x27;../../etc&#x27;" in message
    assert "neither a Hub id" in only_status(call(target_id="not a model!"))


def test_bad_settings_and_pair(tiny_catalog):
    assert "k (draft length)" in only_status(call(k=0))
    assert "temperature" in only_status(call(temperature=5))
    assert "Unknown model pair" in only_status(call(pair="no such pair"))
    assert "Unknown drafter" in only_status(call(drafter="oracle"))


def test_unexpected_error_is_one_line(tiny_catalog, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire\nsecond line of detail")

    monkeypatch.setattr(models, "load_pair", boom)
    views = call()
    assert "Something went wrong: RuntimeError: disk on fire" in views[-1].status
    assert "second line" not in views[-1].status


def test_failed_load_keeps_serving(tiny_catalog, tiny_models, tmp_path):
    broken = tiny_models["target"].parent / "broken"
    broken.mkdir(exist_ok=True)
    (broken / "config.json").write_text("{not json")
    views = call(target_id=str(broken))
    assert "Could not load" in views[-1].status
    assert "status-ok" in call()[-1].status  # the next run works


def test_full_run_with_compare(tiny_catalog):
    state = ui.Session()
    views = call(compare=True, max_new=16, state=state)
    final = views[-1]
    assert "status-ok" in final.status and "Done: " in final.status
    assert 'class="tok tok-accepted"' in final.tokens or 'class="tok tok-correction"' in final.tokens
    assert "Identical outputs" in final.compare and "tok-target" in final.compare
    assert "tokens/s" in final.summary and "measured speedup" in final.summary and "×" in final.summary
    assert len(state.current.rounds) and len(state.current.baseline)
    # streamed: one view per round of each run after the loading message (and the warm-up, the first time)
    warm = sum("Warming up" in str(v.status) for v in views)
    assert warm <= 1 and len(views) == 1 + warm + len(state.current.rounds) + len(state.current.baseline) + 1
    again = call(compare=True, max_new=16, state=ui.Session())
    assert not any("Warming up" in str(v.status) for v in again)  # once per model and drafter
    csv_path, json_path = Path(final.csv["value"]), Path(final.json["value"])
    assert (csv_path.name, json_path.name) == ("trace.csv", "trace.json") and csv_path.parent == json_path.parent
    data = json.loads(json_path.read_text())
    assert data["drafter"] == session.DRAFT_MODEL and len(data["rounds"]) == len(state.current.rounds)
    assert data["baseline"]["tokens"] == 16
    assert csv_path.read_text().count("\n") == len(state.current.rounds) + 1


def test_sampling_compare_says_texts_may_differ(tiny_catalog):
    final = call(compare=True, temperature=1.0, seed=5)[-1]
    assert "need not match" in final.compare


def test_prompt_lookup_needs_no_draft(tiny_catalog):
    final = call(drafter=session.PROMPT_LOOKUP, draft_id="../../etc")[-1]  # the draft id is not even looked at
    assert "status-ok" in final.status


def test_stop_shows_partial_run(tiny_catalog):
    state = ui.Session()
    stream = ui.generate(PAIR, "", "", session.DRAFT_MODEL, 2, False, 0.0, 1.0, 200, 0, "Once upon a time", True, 0, state)
    for _ in range(4):  # loading + 3 rounds
        next(stream)
    stream.close()  # what cancelling does to the generator
    view = ui.stop(state)
    assert "Stopped" in view.status and "3 rounds" in view.status
    assert "tok-accepted" in view.tokens or "tok-correction" in view.tokens
    assert Path(view.csv["value"]).is_file()
    assert "Stopped." in ui.stop(ui.Session()).status
    finished = ui.Session()
    call(state=finished)
    assert all(v == SKIP for v in ui.stop(finished))  # Stop after the end changes nothing


def test_examples_cover_the_categories():
    examples = ui.load_examples()
    assert {"code", "story", "QA", "summarisation", "translation", "math"} <= {e["category"] for e in examples}
    assert all(e["prompt"].strip() and e["title"] for e in examples)


def test_build_demo(tiny_catalog):
    demo = ui.build_demo()
    assert isinstance(demo, gr.Blocks)
    ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
    assert {"prompt", "generate", "stop", "tokens", "summary", "status", "charts", "step-start", "step-next",
            "chart-theory", "sweep-run", "cmp-run", "export-run", "exit-layer"} <= ids
    dropdown = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "pair")
    assert dropdown.value == PAIR
