"""Recorded runs: a run's trace JSON opened again shows what the run showed (tokens, hovers, summary, charts,
comparison, race, tree) with no model; a bad file changes nothing but the status line, and says why; hostile text
in a file is escaped. Plus the gallery in assets/runs/ opens, each run from the file alone."""

from __future__ import annotations

import html
import json
from types import SimpleNamespace
from pathlib import Path

import pytest

from playground.run import recorded
from playground.ui import recorded_runs, run_tab
from playground.ui.common import View
from playground.ui.state import SessionState
from ui_support import SKIP, controls


@pytest.fixture(scope="module")
def traces(tmp_path_factory, tiny_models, runner):
    """{name: (the run's final view, the trace's bytes)} for a compared chain run, a tree run and a sampled run."""
    import os

    os.environ["PLAYGROUND_PAIRS_FILE"] = str(_pairs(tmp_path_factory.mktemp("pairs"), tiny_models))
    out = {}
    for name, changes, compare in (
        ("chain", {}, True),
        ("tree", {"tree": "2-2-1"}, False),
        ("sampled", {"temperature": 0.8, "seed": 3}, True),
    ):
        state = SessionState()
        final = list(run_tab.generate(runner, state, controls(max_new_tokens=20, **changes), compare))[-1]
        assert "status-ok" in final.status, final.status
        out[name] = (final, Path(final.json["value"]).read_bytes())
    yield out
    os.environ.pop("PLAYGROUND_PAIRS_FILE", None)


def _pairs(folder, tiny_models):
    path = folder / "pairs.json"
    path.write_text(
        json.dumps([{"name": "tiny (test)", "draft": str(tiny_models["draft"]), "target": str(tiny_models["target"])}])
    )
    return path


MEMORY = "\n\nMemory this session keeps"


@pytest.mark.parametrize("name", ["chain", "tree", "sampled"])
def test_a_recorded_run_shows_what_the_run_showed(traces, name):
    final, data = traces[name]
    view, values, notes = recorded_runs.open_run(data, SessionState(), "the file")
    assert "Recorded run" in view.status and "no model was loaded" in view.status
    assert view.tokens == final.tokens  # every token, colour and hover
    # the run's summary; the memory line after it is the session's now (ui.budget.line), not the run's
    assert view.summary.split(MEMORY)[0] == final.summary.split(MEMORY)[0] and MEMORY in final.summary
    assert view.compare == final.compare  # the verdict, both texts and the race replay
    assert view.tree == final.tree
    for chart in ("acceptance", "latency", "histogram", "positions"):
        assert getattr(view, chart).to_json() == getattr(final, chart).to_json()
    assert values["k"] == 4 and values["pair"] == "tiny (test)" and values["prompt"] == "Once upon a time" and not notes


def test_the_recorded_run_becomes_the_sessions_run(traces):
    state = SessionState()
    recorded_runs.open_run(traces["chain"][1], state, "the file")
    assert state.run.finished and state.run.baseline_done and state.run.profile is not None


def test_a_recorded_run_saves_again_to_the_same_trace(traces):
    state = SessionState()
    view, _, _ = recorded_runs.open_run(traces["tree"][1], state, "the file")
    again = json.loads(Path(view.json["value"]).read_text())
    first = json.loads(traces["tree"][1])
    assert again["rounds"] == first["rounds"] and again["summary"] == first["summary"]
    assert sorted(map(str, again["decoded"])) == sorted(map(str, first["decoded"]))


# ---------------------------------------------------------------- bad files


def refused(data: bytes) -> str:
    """The status of a refused file; nothing else changes (neither the session's run nor the controls)."""
    state = SessionState()
    state.run = before = SimpleNamespace(finished=True)
    view, values, _ = recorded_runs.open_run(data, state, "the file")
    assert all(getattr(view, f) == SKIP for f in View._fields if f != "status"), view
    assert values == {} and state.run is before
    assert "status-error" in view.status and "Nothing else was changed" in view.status
    return view.status


def edited(traces, change) -> bytes:
    doc = json.loads(traces["chain"][1])
    change(doc)
    return json.dumps(doc).encode()


def test_too_large(traces):
    assert "too large" in refused(b" " * (recorded.MAX_BYTES + 1))


def test_not_json(traces):
    assert "not JSON" in refused(b"\x89PNG\r\n\x1a\n\x00\x00")
    assert "not JSON" in refused(b"[" * 100_000)  # nested past the parser's recursion limit
    assert "not JSON" in refused(b'{"a": NaN')


def test_wrong_schema_or_version(traces):
    assert "not a trace" in refused(b"[1, 2, 3]")
    assert "not a trace of this app" in refused(b'{"format": "something else", "rounds": []}')
    assert "version 1; this app reads version 2" in refused(edited(traces, lambda d: d.update(version=1)))
    old = edited(traces, lambda d: [d.pop(k) for k in ("format", "version", "decoded")])
    assert "older version of the app" in refused(old)


def test_fields_of_the_wrong_type_or_range(traces):
    def round0(**changes):
        return edited(traces, lambda d: d["rounds"][0].update(changes))

    assert "round 0" in refused(round0(k="4"))
    assert "round 0" in refused(round0(accepted=99))
    assert "round 0" in refused(round0(verify_s=-1))
    assert "round 0" in refused(round0(token_kind="<b>x</b>"))
    assert "round 0" in refused(round0(tree_parents=[5, 5, 5, 5]))
    assert "round 0" in refused(round0(draft_tokens=[1e308] * 4))
    assert "rounds" in refused(edited(traces, lambda d: d.update(rounds="many")))
    assert "target_precision" in refused(edited(traces, lambda d: d.update(target_precision="<script>")))
    assert "settings are not valid here" in refused(edited(traces, lambda d: d["config"].update(k=99)))
    assert "Unknown drafter" in refused(edited(traces, lambda d: d.update(drafter="oracle")))
    assert "profile_verify_s" in refused(edited(traces, lambda d: d.update(profile_verify_s={"0": 1.0})))
    assert "decoded" in refused(edited(traces, lambda d: d.update(decoded=[[["x"], False, "t"]])))
    # an interleaved comparison's segments must add up to both sides' rounds: its in-run figures come from them
    assert "per segment, adding up to" in refused(edited(traces, lambda d: d["segments"][0].__setitem__(0, 99)))
    assert "per segment, adding up to" in refused(edited(traces, lambda d: d.update(segments=[[1, "2"]])))
    assert "per segment, adding up to" in refused(edited(traces, lambda d: d.update(segments=5)))
    data = traces["chain"][1]
    at = data.index(b'"rounds": [')  # the first round's seconds, not the summary's
    infinite = data[:at] + data[at:].replace(b'"verify_s": ', b'"verify_s": Infinity, "x": ', 1)
    assert "round 0" in refused(infinite)


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda d: d.update(profile_draft_s=-0.5), "'profile_draft_s' (the draft's seconds per token) must be from 0"),
        (lambda d: d.update(profile_draft_s=1e308), "'profile_draft_s'"),
        (lambda d: d.update(profile_draft_s=float("nan")), "'profile_draft_s'"),
        (lambda d: d["profile_verify_s"].update({"1": 1e300}), "'profile_verify_s'"),
        (
            lambda d: d["rounds"][0].update(draft_s=1e300),
            "round 0 is not a round this app wrote (a field is missing, of "
            "the wrong type or out of range: 'draft_s' must be seconds",
        ),
        (lambda d: d["rounds"][0].update(verify_s=float("nan")), "'verify_s' must be seconds"),
        (lambda d: d["rounds"][0].update(p=[1.7] + d["rounds"][0]["p"][1:]), "'p' must be from 0 to 1"),
        (lambda d: d["rounds"][0].update(q=[-0.2] + d["rounds"][0]["q"][1:]), "'q' must be from 0 to 1"),
        (lambda d: d["rounds"][0].update(u=[1.5]), "'u' must be from 0 to 1"),
        (lambda d: d["rounds"][0].update(token_q=3.0), "'token_q' must be from 0 to 1"),
        (lambda d: d["rounds"][0].update(margins=[-1.0]), "'margins' must be from 0"),
        (
            lambda d: d["rounds"][1].update(total_new=0),
            "round 1 is not a round this app wrote (its 'round' must be 1 and its 'total_new'",
        ),
        (lambda d: d["rounds"][0].update(round=7), "its 'round' must be 0"),
        (lambda d: d["baseline_rounds"][2].update(round=1), "'baseline_rounds': round 2"),
    ],
    ids=[
        "negative draft s",
        "draft s 1e308",
        "draft s NaN",
        "V(1) 1e300",
        "round seconds 1e300",
        "round seconds NaN",
        "p 1.7",
        "q -0.2",
        "u 1.5",
        "token_q 3",
        "margin -1",
        "output shrinks",
        "round out of order",
        "baseline round out of order",
    ],
)
def test_impossible_values_are_refused_naming_the_field(traces, change, named):
    """Issue 35.6: a trace with a negative profile_draft_s (and other values no run can have: times past a day or
    not a number, probabilities outside 0..1, a negative logit margin, rounds out of order, an output that shrinks)
    was shown as if it had run. Now it is refused, naming the field, and nothing else changes."""
    assert named in html.unescape(refused(edited(traces, change)))


def test_hostile_text_is_escaped(traces):
    evil = '<script>alert(1)</script><img src=x onerror="alert(2)">'

    def poison(doc):
        doc["prompt"] = evil
        doc["pair"] = evil
        doc["recorded_at"] = evil
        doc["decoded"] = [[ids, skip, evil] for ids, skip, _ in doc["decoded"]]

    view, _, notes = recorded_runs.open_run(edited(traces, poison), SessionState(), "the file")
    assert "Recorded run" in view.status and notes  # the unknown pair leaves the pair control as it was
    for html in (view.status, view.tokens, view.compare, view.summary):
        assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;" in view.tokens and "&lt;img" in view.compare


# ---------------------------------------------------------------- the gallery


def test_the_gallery_opens_without_a_model(tiny_catalog):
    """Each shipped run opens from its file alone (whatever models this machine has)."""
    names = [name for name, _ in recorded_runs.gallery()]
    assert names == [name for name, _ in recorded_runs.GALLERY]  # all four are shipped
    for name in names:
        data = recorded_runs.read_bounded(recorded_runs.RUNS / f"{name}.json")
        assert len(data) <= recorded.MAX_BYTES
        rec = recorded.read(data)
        view, _, _ = recorded_runs.open_run(data, SessionState(), name)
        assert "Recorded run" in view.status and 'class="tok ' in view.tokens, (name, view.status)
        assert ("race" in view.compare) == bool(rec.baseline)
        assert ("tree" in name) == bool(view.tree)


# ---------------------------------------------------------------- the drafter's options


@pytest.mark.parametrize("name", ["story", "cross", "code", "tree"])
def test_a_trace_from_before_drafter_options_still_opens(name):
    """The gallery's traces have the flat fields of old (exit_layer, chosen_precisions), no drafter_options."""
    data = (Path(__file__).resolve().parents[2] / "assets" / "runs" / f"{name}.json").read_bytes()
    assert b'"drafter_options"' not in data
    run = recorded.read(data)
    doc = json.loads(data)
    assert run.spec.drafter.kind.value == doc["drafter"]
    assert run.spec.drafter.precision == (doc["chosen_precisions"][1] or None)


def test_a_trace_carries_its_drafters_options():
    doc = json.loads((Path(__file__).resolve().parents[2] / "assets" / "runs" / "story.json").read_bytes())
    doc |= {"drafter": "early exit", "drafter_options": {"exit_layer": 2}, "draft": None}
    doc["chosen_precisions"][1] = None
    assert recorded.read(json.dumps(doc).encode()).spec.drafter.options.exit_layer == 2
    doc["drafter_options"] = {"exit_layer": 0}  # the early-exit check, naming the field
    with pytest.raises(recorded.BadRecording, match="early-exit layer must be a whole number >= 1"):
        recorded.read(json.dumps(doc).encode())
    doc["drafter_options"] = {"max_ngram": 3}  # another kind's option
    with pytest.raises(recorded.BadRecording, match="'max_ngram' is not an option of the 'early exit' drafter"):
        recorded.read(json.dumps(doc).encode())


def test_a_recorded_runs_own_options_go_back_to_the_controls():
    """Generate after opening a recorded run runs it again: the drafter's options the page shows go back to their
    widgets (a suffix run's tree depth, say), and no other kind's."""
    doc = json.loads((Path(__file__).resolve().parents[2] / "assets" / "runs" / "story.json").read_bytes())
    doc |= {"drafter": "suffix decoding", "drafter_options": {"suffix_depth": 12, "suffix_memory": True}, "draft": None}
    doc["chosen_precisions"][1] = None
    values, _ = recorded_runs.controls_of(recorded.read(json.dumps(doc).encode()).spec)
    assert values["drafter"] == "suffix decoding" and values["suffix_depth"] == 12 and values["suffix_memory"] is True
    assert values["suffix_factor"] == 1.0 and not any(name.startswith("lookahead_") for name in values)
