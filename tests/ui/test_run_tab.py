"""The Run tab's callbacks called directly on the tiny pairs: clear messages for bad input, a full run
with the comparison, the summary panel, Stop, downloads; and the page itself (build_demo)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import gradio as gr
import pytest

from playground import models, trace
from playground.engine import threads
from playground.core.records import RoundRecord
from playground.core.config import DrafterKind
from playground.run.spec import DrafterSpec, PairSpec, RunSpec
from playground.ui import build_demo, common, recorded_runs, run_tab, run_view
from playground.ui.common import View
from playground.ui.state import KEEP_DOWNLOADS, CurrentRun, SessionState
from ui_support import PAIR, SKIP, TWIN, controls


def call(runner, state=None, compare=False, **changes) -> list[View]:
    return list(run_tab.generate(runner, state if state is not None else SessionState(), controls(**changes), compare))


def only_status(views: list[View]) -> str:
    """The views of a refused run: at most the loading message, then the error; nothing else changes."""
    final = views[-1]
    assert all(getattr(final, f) == SKIP for f in View._fields if f != "status")
    assert "status-error" in final.status and "Traceback" not in final.status
    return final.status


# ---------------------------------------------------------------- bad input


def test_empty_prompt(tiny_catalog, runner):
    views = call(runner, prompt="   ")
    assert len(views) == 1 and "The prompt is empty" in only_status(views)  # refused before anything shows


def test_lone_surrogate_prompt_names_the_prompt(tiny_catalog, runner):
    message = only_status(call(runner, prompt="abc\ud800def"))
    assert "The prompt contains characters that are not valid text" in message


def test_bad_custom_id(tiny_catalog, runner):
    message = only_status(call(runner, draft_id="../../etc"))
    assert "allowed model roots" in message and "&#x27;../../etc&#x27;" in message
    assert "neither a Hub id" in only_status(call(runner, target_id="not a model!"))


def test_bad_settings_and_pair(tiny_catalog, runner):
    assert "k (draft length)" in only_status(call(runner, k=0))
    assert "temperature" in only_status(call(runner, temperature=5))
    assert "Unknown model pair" in only_status(call(runner, pair="no such pair"))
    assert "Unknown drafter" in only_status(call(runner, drafter="oracle"))
    assert "Unknown k policy" in only_status(call(runner, policy="sideways"))
    assert "target precision must be one of" in only_status(call(runner, target_precision="int8"))
    assert "draft precision" in only_status(call(runner, draft_precision="fp8"))
    assert "tree: write children per depth" in only_status(call(runner, tree="3-x"))
    assert "tree: a dynamic tree&#x27;s node budget" in only_status(call(runner, tree="dynamic:1"))
    assert "A token tree needs a drafter" in only_status(call(runner, tree="2-2", drafter="prompt lookup"))
    assert "draft confidence threshold" in only_status(
        call(runner, confidence=1.5, policy="adaptive (draft confidence)")
    )


def test_unexpected_error_is_one_line_without_server_paths(tiny_catalog, runner, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire at /srv/secret/models/x.bin (C:\\models\\y)\nsecond line of detail")

    monkeypatch.setattr(runner, "_load", boom)
    status = call(runner)[-1].status
    assert "Something went wrong: RuntimeError: disk on fire at …" in status
    assert "second line" not in status and "/srv" not in status and "secret" not in status and "models" not in status


def test_failed_load_keeps_serving(tiny_catalog, tiny_models, runner):
    broken = tiny_models["target"].parent / "broken"
    broken.mkdir(exist_ok=True)
    (broken / "config.json").write_text("{not json")
    assert "config.json is not valid JSON" in call(runner, target_id=str(broken))[-1].status
    assert "status-ok" in call(runner)[-1].status  # the next run works
    # a config that reads well and weights that do not: the load itself fails
    for f in tiny_models["target"].iterdir():
        if f.suffix != ".safetensors":
            (broken / f.name).write_bytes(f.read_bytes())
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    assert "Could not load" in call(runner, target_id=str(broken))[-1].status
    assert "status-ok" in call(runner)[-1].status


# ---------------------------------------------------------------- a full run


def test_full_run_with_compare(tiny_catalog, runner):
    state = SessionState()
    views = call(runner, state, compare=True, max_new_tokens=16)
    final = views[-1]
    assert "status-ok" in final.status and "Done: 16 tokens" in final.status
    ttft = trace.summarize(state.run.rounds)["ttft_s"]
    assert f"first token after {ttft:.2f} s." in final.status  # the time to first token in the status line
    assert 'class="tok tok-accepted"' in final.tokens or 'class="tok tok-correction"' in final.tokens
    assert "Identical outputs" in final.compare and "tok-target" in final.compare
    run = state.run
    assert run.rounds and run.baseline_done and run.finished and run.profile is not None
    # streamed: the speculative rounds in the token box and the target alone's in the comparison panel, interleaved
    statuses = [v.status for v in views if v.status != SKIP]
    assert any("Speculative: round" in s for s in statuses) and any("Target alone: round" in s for s in statuses)
    sides = [s.split(":")[0] for s in statuses if "round" in s and "interleaved" in s]
    assert sum(a != b for a, b in zip(sides, sides[1:])) >= 3  # back and forth, not one after the other
    assert run.segments and sum(n for n, _ in run.segments) == len(run.rounds)
    assert any(v.compare != SKIP and "Target alone (running)" in v.compare for v in views)
    streamed = [
        v.tokens for v in views[:-1] if v.tokens != SKIP and "tok-output" in v.tokens and "tok-empty" not in v.tokens
    ]
    assert streamed[-1] == final.tokens  # the last round streamed shows what the final view shows
    again = call(runner, SessionState(), compare=True, max_new_tokens=16)
    assert not any("Warming up" in str(v.status) for v in again)  # the runner warms up once per model and drafter
    csv_path, json_path = Path(final.csv["value"]), Path(final.json["value"])
    assert (csv_path.name, json_path.name) == ("trace.csv", "trace.json") and csv_path.parent == json_path.parent
    data = json.loads(json_path.read_text())
    assert data["drafter"] == DrafterKind.DRAFT_MODEL.value and len(data["rounds"]) == len(run.rounds)
    assert data["baseline_summary"]["tokens"] == 16 and data["target_precision"] == "fp32"
    panel = run.summary()
    assert data["summary"]["step_source"] == trace.IN_RUN and data["summary"]["c"] == panel["c"]  # the panel's figures
    assert data["segments"] == [list(s) for s in run.segments] and data["summary"]["segments"] == panel["segments"]
    assert data["summary"]["speedup"] == panel["speedup"] and sorted(map(int, data["profile_verify_s"])) == [
        1,
        2,
        3,
        5,
        9,
        17,
    ]
    assert csv_path.read_text().count("\n") == len(run.rounds) + 1


def numbers(summary: str) -> dict:
    """The summary panel's speedup row and c, as text."""
    ideal, calibrated, measured = re.search(
        r"\n\| \*\*(.+?)\*\* \| \*\*(.+?)\*\* \| \*\*(.+?)\*\* \|", summary
    ).groups()
    c = re.search(
        r"\| c, draft cost per token in target steps \(target step: (.+?)\) \| \*\*(.+?)\*\* \|", summary
    ).groups()
    return {"ideal": ideal, "calibrated": calibrated, "measured": measured, "c": c}


def test_the_comparison_measures_c_v_and_the_predictions_in_the_run(tiny_catalog, runner, monkeypatch):
    """With the target alone interleaved, c and the calibrated prediction are this run's own (its target steps),
    the measured speedup and the segments' spread appear; without it, the same rounds show the start-up's
    calibration, labelled as not this run's."""
    monkeypatch.setattr(threads, "cpu_seconds", lambda: None)  # no load read: no segment set apart (next test)
    state = SessionState()
    final = call(runner, state, compare=True, max_new_tokens=16)[-1]
    with_base = numbers(final.summary)
    alone = replace(state.run, baseline=[], segments=[])
    without = numbers(run_view.summary_markdown(alone.summary(), alone))
    assert with_base["c"][0] == trace.IN_RUN and without["c"][0].startswith("V(1) from the runner's calibration")
    s_with, s_without = state.run.summary(), alone.summary()
    # unrounded: two runs' c can round to the same two digits of the prediction (0.096 and 0.125 both gave 0.91x)
    assert s_with["c"] != s_without["c"] and s_with["calibrated_speedup"] != s_without["calibrated_speedup"]
    assert with_base["calibrated"] == run_view.fmt(s_with["calibrated_speedup"], 2, "×")
    assert without["calibrated"] == run_view.fmt(s_without["calibrated_speedup"], 2, "×")
    assert with_base["calibrated"].endswith("×") and with_base["measured"].endswith("×")
    assert without["measured"].startswith("–")
    assert run_view.SPEEDUPS[0] in final.summary and run_view.SPEEDUPS[1] in final.summary
    assert run_view.SPEEDUPS[2] in final.summary or run_view.MEASURED_QUIET in final.summary  # a loaded CI machine
    alone_summary = run_view.summary_markdown(alone.summary(), alone)
    assert run_view.CALIBRATED_BEFORE in alone_summary and run_view.SPEEDUPS[1] not in alone_summary
    assert "segments, interleaved" in final.summary and "segments, interleaved" not in alone_summary
    ran = f"target fp32 · draft {models.default_draft_precision().value}"  # int4 where the kernels run, else int8
    assert "best k, calibrated model" in final.summary and ran in final.summary


def test_the_spread_warns_when_the_load_changed():
    quiet = dict(segments=4, segment_speedup_min=1.5, segment_speedup_max=1.7, step_spread=0.05, loaded_segments=0)
    assert run_view.spread(quiet) == "4 segments · 1.50× to 1.70× · the target alone's step varied 5%"
    assert "noisy" in run_view.spread(quiet | dict(step_spread=0.8)) and "varied 80%" in run_view.spread(
        quiet | dict(step_spread=0.8)
    )
    loaded = run_view.spread(quiet | dict(step_spread=0.8, loaded_segments=2, speedup_loaded=2.5, speedup_all=2.1))
    assert "2 ran while other programs used the CPU" in loaded and "2.50× there, 2.10× over the whole run" in loaded
    assert "noisy" not in loaded  # the load is named, and its segments left out


def test_segments_run_under_load_are_set_apart_on_the_page(tiny_catalog, runner, monkeypatch):
    """The comparison's rounds carry the load they started under (RoundRecord.load, read by the runner's thread
    fit); when the later segments ran under load, the page's measured speedup is the quiet segments' and says so."""
    state = SessionState()
    call(runner, state, compare=True, max_new_tokens=48)
    run = state.run
    assert all(r.threads >= 1 and r.load >= 0 for r in run.rounds + run.baseline)
    assert len(run.segments) >= 4  # the first half holds the prompt's segment and another (trace.QUIET_AFTER_FIRST)
    half = len(run.segments) // 2
    spec_cut, base_cut = (sum(seg[i] for seg in run.segments[:half]) for i in (0, 1))
    busy = lambda rounds, cut: [replace(r, load=0.0 if i < cut else 1.0) for i, r in enumerate(rounds)]
    hogged = replace(run, rounds=busy(run.rounds, spec_cut), baseline=busy(run.baseline, base_cut))
    s = hogged.summary()
    shown = run_view.summary_markdown(s, hogged)
    assert s["loaded_segments"] == len(run.segments) - half and run_view.MEASURED_QUIET in shown
    assert run_view.fmt(s["speedup"], 2, "×") in shown and "ran while other programs used the CPU" in shown
    calm = replace(run, rounds=busy(run.rounds, 10**6), baseline=busy(run.baseline, 10**6))
    assert run_view.MEASURED_QUIET not in run_view.summary_markdown(calm.summary(), calm)


def test_streamed_and_final_panels_agree(tiny_catalog, runner, monkeypatch):
    monkeypatch.setattr(run_tab, "TEXT_EVERY_S", 0.0)
    monkeypatch.setattr(run_tab, "CHART_EVERY_S", 0.0)  # panels with every round
    state = SessionState()
    views = call(runner, state, max_new_tokens=20)
    last_streamed = [v for v in views[:-1] if v.summary != SKIP and v.summary][-1]
    final = views[-1]
    # the final summary adds the session's memory line (ui.budget.line) after the run's own
    assert final.summary.startswith(last_streamed.summary + "\n\nMemory this session keeps")
    for name in ("acceptance", "latency", "histogram", "positions"):  # as JSON: a NaN in a chart equals itself there
        assert getattr(last_streamed, name).to_json() == getattr(final, name).to_json()


def test_sampling_compare_says_texts_may_differ(tiny_catalog, runner):
    final = call(runner, compare=True, temperature=1.0, seed=5)[-1]
    assert "need not match" in final.compare


def test_prompt_lookup_needs_no_draft(tiny_catalog, runner):
    state = SessionState()
    final = call(runner, state, drafter="prompt lookup", draft_id="../../etc")[-1]  # the draft id is not looked at
    assert "status-ok" in final.status and "draft: prompt lookup (no model)" in final.summary


def test_early_exit_in_the_app_equals_the_target_alone(tiny_catalog, runner):
    final = call(runner, drafter="early exit", compare=True, exit_layer=1, max_new_tokens=24)[-1]
    assert "status-ok" in final.status and "Identical outputs" in final.compare
    assert (
        "early-exit layer must be a whole number from 1 to 1"
        in call(runner, drafter="early exit", exit_layer=5)[-1].status
    )


def test_self_int4_in_the_app_equals_the_target_alone(tiny_catalog, runner):
    """The target's own int8 copy drafts (int4 once its kernels are in); an fp32 target is refused, saying why."""
    final = call(runner, drafter="self int4", self_bits=8, target_precision="bf16", compare=True, max_new_tokens=24)[-1]
    if "status-error" in final.status:  # no batch-invariant kernels on this machine
        assert "cannot run it here" in final.status
        return
    assert "status-ok" in final.status and "Identical outputs" in final.compare
    assert "the target's own quantised copy" in final.summary
    refused = call(runner, drafter="self int4", self_bits=8, target_precision="fp32")[-1].status
    assert "the CPU kernels, which cannot run it here: the model is float32" in refused


def test_a_tree_run_shows_its_latest_tree_with_the_accepted_path(tiny_catalog, runner):
    state = SessionState()
    final = call(runner, state, compare=True, pair=TWIN, tree="3-2-1", max_new_tokens=16)[-1]
    assert "status-ok" in final.status and "Identical outputs" in final.compare
    latest = [r for r in state.run.rounds if r.is_tree][-1]
    assert latest.accepted == 3  # the twin draft is the target: every round keeps the full depth
    assert (
        'class="tree-view"' in final.tree
        and f"Round {latest.round + 1}: a tree of {latest.k} draft tokens" in final.tree
    )
    assert final.tree.count('data-kind="accepted"') == latest.accepted and 'data-kind="bonus"' in final.tree
    assert "tok-accepted" in final.tokens and final.tree != final.tokens


def test_a_chain_run_has_no_tree_panel(tiny_catalog, runner):
    views = call(runner, max_new_tokens=8)
    assert views[-1].tree == "" and all(v.tree in ("", SKIP) for v in views)


def test_staged_drafting_in_the_app_equals_the_target_alone(tiny_catalog, runner):
    final = call(runner, drafter=DrafterKind.STAGED.value, compare=True, max_new_tokens=24)[-1]
    assert "status-ok" in final.status and "Identical outputs" in final.compare
    assert (
        "its drafts by prompt lookup" in final.summary and "staged: lookup tokens the draft model kept" in final.summary
    )
    assert "staged:" not in call(runner, max_new_tokens=4)[-1].summary


# ---------------------------------------------------------------- the comparison verdict


def rounds_of(tokens: list[int], margins: list[float]) -> list[RoundRecord]:
    return [
        RoundRecord(
            round=0,
            k=0,
            draft_tokens=[],
            accepted=0,
            token=tokens[-1],
            token_kind="target",
            new_tokens=tokens,
            draft_s=0.0,
            verify_s=0.01,
            total_new=len(tokens),
            margins=margins,
            stop="length",
        )
    ]


@pytest.mark.parametrize(
    "base, margins, level, words",
    [
        ([1, 2, 3, 4], [5.0] * 4, "ok", "Identical outputs"),
        (
            [1, 2, 9, 9],
            [5.0, 5.0, 0.2, 5.0],
            "info",
            "identical up to token 2, where the target's top-2 logit gap was 0.200",
        ),
        ([1, 2, 9, 9], [5.0, 5.0, 3.0, 5.0], "error", "differ from token 2 on"),
    ],
)
def test_comparison_verdict(base, margins, level, words):
    spec = RunSpec(PairSpec("p", "t", "d"), DrafterSpec(), prompt="x")
    run = CurrentRun(
        spec, target_precision="bf16", rounds=rounds_of([1, 2, 3, 4], margins), baseline=rounds_of(base, margins)
    )
    message, got = run_view.comparison_verdict(run)
    assert got == level and words in message
    if level == "info":
        assert "bf16 rounding can flip" in message and "pass of k + 1 tokens and the pass of 1" in message


# ---------------------------------------------------------------- Stop and downloads


def test_stop_shows_partial_run(tiny_catalog, runner):
    state = SessionState()
    stream = run_tab.generate(runner, state, controls(k=2, max_new_tokens=200), True)
    while state.run is None or len(state.run.rounds) < 3:
        next(stream)
    stream.close()  # what cancelling does to the generator
    view = run_tab.stop(state)
    assert "Stopped" in view.status and f"{len(state.run.rounds)} rounds" in view.status
    assert "tok-accepted" in view.tokens or "tok-correction" in view.tokens
    assert Path(view.csv["value"]).is_file()
    assert "Stopped." in run_tab.stop(SessionState()).status
    finished = SessionState()
    call(runner, finished)
    assert all(v == SKIP for v in run_tab.stop(finished))  # Stop after the end changes nothing


def test_downloads_are_few_per_session(tiny_catalog, runner):
    state = SessionState()
    paths = [Path(call(runner, state, max_new_tokens=4)[-1].csv["value"]) for _ in range(KEEP_DOWNLOADS + 2)]
    assert all(p.parent.parent == paths[0].parent.parent for p in paths)  # one folder per session
    assert [p.is_file() for p in paths] == [False] * 2 + [True] * KEEP_DOWNLOADS
    assert call(runner, state, prompt=" ")[-1].csv == SKIP  # a refused run writes nothing
    state.close()
    assert not paths[0].parent.parent.exists()


def test_unexpected_keeps_one_line_and_hides_paths():
    status = common.unexpected(OSError("cannot open /home/someone/models/x.safetensors: denied\nmore"))
    assert "cannot open …: denied" in status and "/home" not in status and "more" not in status
    assert "a/b stays" in common.unexpected(ValueError("a/b stays"))


# ---------------------------------------------------------------- the page


def test_examples_cover_the_categories():
    examples = common.load_examples()
    assert {"code", "story", "QA", "summarisation", "translation", "math"} <= {e["category"] for e in examples}
    assert all(e["prompt"].strip() and e["title"] for e in examples)


def blocks_by_id(demo: gr.Blocks) -> dict:
    return {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}


def test_build_demo(tiny_catalog, runner):
    demo = build_demo(runner)
    assert isinstance(demo, gr.Blocks)
    blocks = blocks_by_id(demo)
    assert {
        "prompt",
        "generate",
        "stop",
        "tokens",
        "summary",
        "status",
        "charts",
        "step-start",
        "step-next",
        "chart-theory",
        "chart-profile",
        "sweep-run",
        "cmp-run",
        "export-run",
        "exit-layer",
        "target-precision",
        "draft-precision",
        "tree",
        "tree-shape",
        "confidence",
    } <= set(blocks)
    assert blocks["pair"].value == PAIR
    assert blocks["target-precision"].value == "default" and "fp32 (default)" in str(blocks["target-precision"].choices)
    assert {"fp32", "bf16", "int8"} <= {value for _, value in blocks["draft-precision"].choices}
    assert {"fixed k", "adaptive (heuristic)", "adaptive (theory)", "adaptive (draft confidence)"} == {
        value for _, value in blocks["adaptive"].choices
    }
    endpoints = set(demo.get_api_info()["named_endpoints"])
    assert {"/generate", "/stop", "/step_start", "/step_next", "/sweep", "/compare", "/export"} <= endpoints


def test_the_first_generate_on_the_initial_prompt_produces_tokens(tiny_catalog, runner):
    """The page as it opens: the example prompt, *Compare with target alone* ticked, so the first Generate shows
    the measured speedup, the same-text check and the race replay without another click."""
    blocks = blocks_by_id(build_demo(runner))
    prompt, compare = blocks["prompt"].value, blocks["compare-box"].value
    assert prompt.strip() and prompt == common.load_examples()[0]["prompt"]
    assert compare is True
    final = call(runner, prompt=prompt, max_new_tokens=8, compare=compare)[-1]
    assert "status-ok" in final.status and final.tokens.count('class="tok tok-') >= 1
    assert numbers(final.summary)["measured"].endswith("×") and "Identical outputs" in final.compare


def test_controls_are_the_inputs_in_page_order():
    assert (
        common.N_CONTROLS == 30 and controls().as_inputs()[0] == PAIR and controls().as_inputs()[-1].startswith("Once")
    )


# ---------------------------------------------------------------- draft-free drafters

REPEATED = "def f(x):\n    return x + 1\n\ndef f(x):\n    return x + 1\n\ndef f(x):\n   "


def test_draft_free_options_are_refused_naming_the_option(tiny_catalog, runner):
    lookahead = dict(drafter="lookahead decoding")
    assert "the window W must be a whole number from 1 to 16" in only_status(
        call(runner, lookahead_window=40, **lookahead)
    )
    assert "a smaller W, N or G" in only_status(call(runner, lookahead_window=16, lookahead_ngram=8, **lookahead))
    assert "suffix decoding: the spec factor" in only_status(call(runner, drafter="suffix decoding", suffix_factor=-1))
    assert "suffix memory must be true or false" in only_status(
        call(runner, drafter="suffix decoding", suffix_memory="yes please")
    )
    assert "drafts a chain only" in only_status(call(runner, tree="2-2", **lookahead))
    fine = call(runner, lookahead_window=40, drafter="suffix decoding", prompt=REPEATED, max_new_tokens=4)
    assert "status-ok" in fine[-1].status  # another drafter's options are not read


def test_a_suffix_run_explains_its_latest_draft_and_may_remember_the_session(tiny_catalog, runner):
    state = SessionState()
    final = call(runner, state, drafter="suffix decoding", prompt=REPEATED, max_new_tokens=12, compare=True)[-1]
    assert "status-ok" in final.status and "Identical outputs" in final.compare
    assert (
        "Suffix decoding: the sequence&#x27;s last" in final.tree
        or "Suffix decoding: the sequence's last" in final.tree
    )
    memory = state.kept(DrafterKind.SUFFIX)  # the session's memory of earlier runs (made by the first suffix run)
    assert memory.tree.seqs == {}  # off by default: the run stands alone
    again = call(runner, state, drafter="suffix decoding", prompt=REPEATED, max_new_tokens=12, suffix_memory=True)[-1]
    assert "status-ok" in again.status and list(memory.tree.seqs) == [0]
    twice = call(runner, state, drafter="suffix decoding", prompt=REPEATED, max_new_tokens=12, suffix_memory=True)[-1]
    assert 'data-source="memory"' in twice.tokens and "session&#x27;s earlier runs" in twice.tokens
    assert "kept drafts by source" in twice.summary


def test_a_lookahead_run_shows_its_window(tiny_catalog, runner):
    final = call(
        runner,
        drafter="lookahead decoding",
        prompt=REPEATED,
        max_new_tokens=16,
        lookahead_prompt_pool=True,
        compare=True,
    )[-1]
    assert "status-ok" in final.status and "Identical outputs" in final.compare
    assert "Lookahead decoding, one target pass" in final.tree and "level 1" in final.tree


def test_a_sized_tree_run_shows_its_plan_in_the_tree_panel_and_the_summary(tiny_catalog, runner):
    final = call(runner, SessionState(), tree="sized:6", max_new_tokens=24)[-1]
    assert "Sized tree (Sequoia)" in final.tree and "target steps" in final.tree
    row = re.search(
        r"\| sized tree: tokens per round and target steps per round, planned · measured \| \*\*(.+?)\*\*",
        final.summary,
    )
    assert row and re.fullmatch(r"[\d.]+ in [\d.]+ · [\d.]+ in [\d.]+", row.group(1)), final.summary
    assert "sized tree" not in call(runner, SessionState(), tree="dynamic:6", max_new_tokens=24)[-1].summary


def test_the_first_token_says_when_the_prompt_s_prefill_was_kept(tiny_catalog, runner):
    """A run whose first round fed the target no prompt (the start-up kept the example prompt's prefill,
    playground/run/prefixes.py) says so beside its time to first token; a run that prefilled does not."""
    state = SessionState()
    final = call(runner, state, compare=False, max_new_tokens=8)[-1]
    assert run_view.TTFT in final.summary and run_view.TTFT_KEPT not in final.summary
    assert state.run.rounds[0].prefill > 0
    first = replace(state.run.rounds[0], prefill=0)
    kept = replace(state.run, rounds=[first, *state.run.rounds[1:]])
    shown = run_view.summary_markdown(kept.summary(), kept)
    assert run_view.TTFT_KEPT in shown and run_view.TTFT + " |" not in shown
    assert state.run.prompt_tokens > 1
    one = replace(kept, prompt_tokens=1)  # a one-token prompt (no chat template): its round 0 feeds no prompt either
    assert run_view.TTFT_KEPT not in run_view.summary_markdown(one.summary(), one)
    # the trace carries the prompt's length: a run opened again from its file labels its first token as it ran
    for run, label in ((kept, run_view.TTFT_KEPT), (one, run_view.TTFT + " |")):
        doc = json.loads(Path(run_view.write_trace(run, state)[1]).read_text())
        assert doc["prompt_tokens"] == run.prompt_tokens
        view = recorded_runs.open_run(json.dumps(doc).encode(), SessionState(), "the file")[0]
        assert label in view.summary, view.summary
    del doc["prompt_tokens"]  # a trace from before the key: round 0's prefill alone decides, as it did then
    view = recorded_runs.open_run(json.dumps(doc).encode(), SessionState(), "the file")[0]
    assert run_view.TTFT_KEPT in view.summary


def test_the_first_tokens_go_out_before_the_charts(tiny_catalog, runner):
    """Building and drawing the four charts takes a while: the view with the first round's tokens carries no chart
    and no summary, which follow within CHART_EVERY_S (and in the final view)."""
    views = call(runner, SessionState(), compare=False, max_new_tokens=20)
    first = next(v for v in views if v.tokens != SKIP and 'class="tok tok-' in v.tokens)
    assert first.summary == SKIP and first.acceptance == SKIP and first.latency == SKIP
    assert views[-1].summary != SKIP and views[-1].acceptance != SKIP
