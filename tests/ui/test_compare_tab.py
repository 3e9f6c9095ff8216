"""The Compare pairs tab's callback on the tiny pairs: every pair x drafter against its own target alone, and a
vLLM engine row beside them (started here, or the session's vLLM server by URL); bad vLLM input is named
before anything of ours runs, and Stop ends vLLM's engine."""

from __future__ import annotations

import html
import json
import time
from dataclasses import replace

import pytest

from playground import bench
from playground.vllm import peer as vllm_peer
from playground.ui.compare_tab import run_compare
from playground.ui.state import SessionState
from tests.vllm_support import not_vllm_server, require_vllm
from ui_support import PAIR, SKIP, TWIN, controls

BASELINE = "target alone"
VLLM_PAIR = "tiny vllm (test)"


def compare(runner, pairs, drafters, vllm=(), should_stop=None, **changes):
    return run_compare(runner, SessionState(), pairs, drafters, controls(**changes), vllm, should_stop=should_stop)


def test_pair_comparison(tiny_catalog, runner):
    # fp32 draft: the twin is then the target's exact copy (an int8 twin, LM head included, is not)
    status, fig, positions, table, csv = compare(
        runner, [PAIR, TWIN], ["draft model", "prompt lookup"], k=3, max_new_tokens=16, draft_precision="fp32"
    )
    assert "2 pair(s) × 2 drafter(s)" in status
    assert len(table) == 2 * (1 + 2)
    twin = table[(table["pair"] == TWIN) & (table["method"].str.startswith("draft model"))]
    assert len(twin) == 1
    assert twin["alpha"].iloc[0] == 1.0  # the twin is the target: every draft accepted
    assert all(table[table["method"] != BASELINE]["greedy_equal"])
    assert {d.name for d in fig.data} == set(table[table["method"] != BASELINE]["method"])
    assert csv["value"].endswith("comparison.csv")
    assert {d.name for d in positions.data} >= {"draft model (fp32) k=3 · tiny twin"}  # acceptance by position


def test_comparison_checks_its_request(tiny_catalog, runner, monkeypatch):
    assert "Pick at least one pair" in compare(runner, [], ["draft model"])[0]
    assert "Unknown drafter" in compare(runner, [PAIR], ["oracle"])[0]
    assert "k (draft length)" in compare(runner, [PAIR], ["draft model"], k=17)[0]
    assert (
        "allowed model roots"
        not in compare(runner, [PAIR], ["prompt lookup"], draft_id="../../etc", max_new_tokens=4)[0]
    )
    monkeypatch.setattr(bench, "MAX_CELLS", 5)  # the cap counts the runs of the whole request, over every pair
    status = compare(runner, [PAIR, TWIN], ["draft model", "prompt lookup"])[0]
    assert "That grid needs 6 runs" in status and "the limit is 5" in status  # 4 and 2 of the target alone


def test_draft_model_runs_each_pairs_own_drafter(tiny_catalog, cross_models, runner):
    """A cross-tokenizer pair in the comparison runs its draft through the cross-tokenizer drafter when
    "draft model" is picked (the same-tokenizer drafter would refuse it); a same-tokenizer pair keeps the
    plain one, and can still run the cross-tokenizer drafter when that is picked too."""
    import json

    cross = "tiny cross (test)"
    pairs = json.loads(tiny_catalog.read_text()) + [
        {
            "name": cross,
            "draft": cross_models["draft"],
            "target": cross_models["target"],
            "drafter": "cross-tokenizer draft model",
        }
    ]
    tiny_catalog.write_text(json.dumps(pairs))
    status, fig, positions, table, csv = compare(
        runner,
        [PAIR, cross],
        ["draft model", "cross-tokenizer draft model"],
        k=3,
        max_new_tokens=12,
        draft_precision="fp32",
    )
    assert "Comparison done: 2 pair(s)" in status, status
    methods = {(p, m) for p, m in zip(table["pair"], table["method"])}
    assert methods == {
        (PAIR, BASELINE),
        (PAIR, "draft model (fp32)"),
        (PAIR, "cross-tokenizer draft model (fp32)"),
        (cross, BASELINE),
        (cross, "cross-tokenizer draft model (fp32)"),
    }
    assert all(table[table["method"] != BASELINE]["greedy_equal"])


# ---------------------------------------------------------------- a vLLM engine row


@pytest.fixture
def vllm_catalog(tiny_catalog, vllm_pair):
    pairs = json.loads(tiny_catalog.read_text()) + [
        {"name": VLLM_PAIR, "draft": str(vllm_pair["draft"]), "target": str(vllm_pair["target"])}
    ]
    tiny_catalog.write_text(json.dumps(pairs))
    return tiny_catalog


def check_vllm_rows(table, fig, positions, method: str) -> None:
    ours_base = table[(table["engine"] == "ours") & (table["method"] == BASELINE)]
    vllm = table[(table["engine"] == "vllm") & (table["method"] == method)]
    assert len(ours_base) == 1 and len(vllm) == 1
    assert vllm["greedy_equal"].iloc[0]  # fp32 on both sides: vLLM's output is our target alone's
    assert 0 <= vllm["alpha"].iloc[0] <= 1 and vllm["mean_acceptance_length"].iloc[0] >= 1
    assert method in {d.name for d in fig.data}  # in the same bars as ours, labelled as vLLM's
    assert any(d.name.startswith(method) and d.line.dash == "dash" for d in positions.data)


def test_a_vllm_engine_started_here_for_the_same_pair(vllm_catalog, runner, monkeypatch):
    require_vllm()
    monkeypatch.setattr(vllm_peer, "HERE", replace(vllm_peer.HERE, fast_start=True))  # seconds, not minutes
    status, fig, positions, table, csv = compare(
        runner,
        [VLLM_PAIR],
        ["draft model", "early exit"],
        vllm=(vllm_peer.VLLM_HERE, "", "", ""),
        k=3,
        max_new_tokens=12,
        draft_precision="fp32",
        target_precision="fp32",
    )
    assert "and 2 vLLM engine row(s) from vLLM started here" in status, status
    # vLLM's draft model for ours, nothing for early exit (vLLM has none), its target alone for the speedup
    assert set(table[table["engine"] == "vllm"]["method"]) == {"vLLM target alone", "vLLM draft model"}
    check_vllm_rows(table, fig, positions, "vLLM draft model")
    base = table[table["method"] == "vLLM target alone"]
    assert base["speedup"].iloc[0] == 1.0 and "vLLM target alone" not in {d.name for d in fig.data}


def test_a_vllm_server_by_url(vllm_catalog, runner, vllm_server, allow_vllm):
    status, fig, positions, table, csv = compare(
        runner,
        [VLLM_PAIR],
        ["draft model"],
        vllm=(vllm_peer.VLLM_URL, vllm_server.base + "/v1", "tiny", ""),
        k=3,
        max_new_tokens=12,
        draft_precision="fp32",
        target_precision="fp32",
    )
    assert f"from the vLLM server at {vllm_server.base}" in status, status
    check_vllm_rows(table, fig, positions, "vLLM server")


def test_bad_vllm_input_is_named_before_our_runs(vllm_catalog, runner, tmp_path, monkeypatch, allow_vllm):
    cases = {
        (vllm_peer.VLLM_URL, "", "", ""): "give its URL",
        (vllm_peer.VLLM_URL, "localhost 8000", "", ""): "give it as http://host:port",
        (
            vllm_peer.VLLM_URL,
            "http://127.0.0.1:9",
            "",
            "",
        ): "Cannot reach a vLLM server at http://127.0.0.1:9",  # listed, no one there
        (vllm_peer.VLLM_URL, "http://127.0.0.1:10", "", ""): "is not one of the vLLM servers this app may reach",
        ("a cluster", "", "", ""): "Unknown vLLM engine choice",
    }
    for vllm, message in cases.items():
        start = time.monotonic()
        status = compare(runner, [PAIR], ["draft model"], vllm=vllm)[0]
        assert message in status and "status-error" in status, (vllm, status)
        assert time.monotonic() - start < 30
    monkeypatch.setenv("PLAYGROUND_VLLM_VENV", str(tmp_path / "nowhere"))
    status = compare(runner, [PAIR], ["draft model"], vllm=(vllm_peer.VLLM_HERE, "", "", ""))[0]
    assert "vLLM is not installed" in status and "install" in status


@pytest.mark.parametrize("openai", [False, True], ids=["plain http", "openai-compatible"])
def test_a_server_that_is_not_vllm_is_named_before_our_runs(tiny_catalog, runner, openai, monkeypatch):
    with not_vllm_server(openai) as url:
        monkeypatch.setenv("PLAYGROUND_VLLM_URLS", url)
        start = time.monotonic()
        status, *outputs = compare(runner, [PAIR], ["draft model"], vllm=(vllm_peer.VLLM_URL, url, "", ""))
    message = "OpenAI-compatible but not vLLM" if openai else "is not a vLLM server"
    assert message in html.unescape(status) and "status-error" in status, status
    assert time.monotonic() - start < 30 and outputs == [SKIP] * 4  # said before anything of ours ran


def test_with_no_server_allowed_the_row_offers_only_vllm_started_here(tiny_catalog, runner, monkeypatch):
    """Issue 35.2: any URL was taken (loopback, the app itself, 169.254.169.254). With PLAYGROUND_VLLM_URLS empty (the
    default) the tab offers no URL field, and a URL sent through the API anyway reaches nothing."""
    from playground.ui import build_demo
    from tests.listener import listener

    monkeypatch.delenv("PLAYGROUND_VLLM_URLS", raising=False)
    demo = build_demo(runner)
    blocks = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    assert [c[0] for c in blocks["cmp-vllm"].choices] == [vllm_peer.NO_VLLM, vllm_peer.VLLM_HERE]
    assert blocks["cmp-vllm-server"].visible is False  # the row of the URL, model, target-alone URL and key fields
    with listener() as (url, seen):
        status, *outputs = compare(runner, [PAIR], ["draft model"], vllm=(vllm_peer.VLLM_URL, url, "", ""))
    assert "reaches no vLLM server by URL" in status and "status-error" in status, status
    assert seen.requests == [] and outputs == [SKIP] * 4
    monkeypatch.setenv("PLAYGROUND_VLLM_URLS", "http://gpu-box:8000")
    blocks = {getattr(b, "elem_id", None): b for b in build_demo(runner).blocks.values()}
    assert vllm_peer.VLLM_URL in [c[0] for c in blocks["cmp-vllm"].choices] and blocks["cmp-vllm-server"].visible


def test_a_model_the_server_does_not_serve_is_named(vllm_catalog, runner, vllm_server, allow_vllm):
    status = compare(runner, [VLLM_PAIR], ["draft model"], vllm=(vllm_peer.VLLM_URL, vllm_server.base, "qwen", ""))[0]
    assert "serves ['tiny'], not 'qwen'" in html.unescape(status)


def test_stop_ends_vllms_engine_and_keeps_ours(vllm_catalog, runner, tmp_path, monkeypatch):
    """A vLLM environment whose engine never answers (a stand-in python that sleeps): Stop (should_stop) ends it
    and every process it started; our rows stay."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "vllm").write_text("")
    child = tmp_path / "child.pid"
    (venv / "bin" / "python").write_text(f"#!/bin/bash\nsleep 300 & echo $! > {child}\nsleep 300\n")
    (venv / "bin" / "python").chmod(0o755)
    monkeypatch.setenv("PLAYGROUND_VLLM_VENV", str(venv))
    asked = time.monotonic() + 3600

    def should_stop() -> bool:
        nonlocal asked
        asked = min(asked, time.monotonic())
        return child.exists() and time.monotonic() - asked > 1.0

    start = time.monotonic()
    status, fig, positions, table, csv = compare(
        runner,
        [PAIR],
        ["draft model"],
        vllm=(vllm_peer.VLLM_HERE, "", "", ""),
        should_stop=should_stop,
        k=3,
        max_new_tokens=8,
    )
    assert "Ours done; no vLLM row: Stopped" in status, status
    assert time.monotonic() - start < 60
    assert set(table["engine"]) == {"ours"} and len(table) == 2
    pid = int(child.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
