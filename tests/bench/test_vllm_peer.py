"""vLLM's rows beside ours (playground/vllm/peer.py, report.py, benchmark.py, `--compare-vllm`).

The command line (the program python -m playground.bench: bench's with vLLM's peer) end to end on the tiny vLLM pair (fp32, vLLM started fast: no torch.compile, one process):
vLLM's target alone, draft model at our k and ngram with our max_ngram, greedy and T = 0.7, on our prompt
tokens; greedy outputs equal to ours; counters beside ours under vLLM's names; the report's section. Against
the session's vLLM server: the server's rows. Then the pure parts by hand: which k and methods vLLM runs,
the tab's choices, acceptance by position, the report's tables. Without vLLM's environment the tests that
run it skip (or fail under PLAYGROUND_REQUIRE_VLLM=1).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from playground import bench
from playground.bench import report
from playground.bench.__main__ import main as program
from playground.vllm import peer as vllm_peer, report as vllm_report
from playground.trace.results import Result
from playground.vllm.peer import VLLMEngine, engine_choice, methods_for, vllm_ks
from playground.vllm.report import positions_frame
from playground.core.errors import PlaygroundError
from playground.run.runner import Runner
from playground.core.config import DecodeConfig, DrafterKind, KPolicy
from playground.run.spec import DrafterSpec, PairSpec
from tests.vllm_support import require_vllm

PAIR = "tiny vllm (test)"
PROMPTS = {"story": "Once upon a time", "code": "def fibonacci(n):"}


@pytest.fixture
def vllm_catalog(vllm_pair, tmp_path, monkeypatch):
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps([{"name": PAIR, "draft": str(vllm_pair["draft"]), "target": str(vllm_pair["target"])}]))
    monkeypatch.setenv("PLAYGROUND_PAIRS_FILE", str(path))
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    return prompts


def test_compare_vllm_puts_vllms_rows_beside_ours(vllm_catalog, tmp_path, capsys):
    require_vllm()
    out, md = tmp_path / "bench.json", tmp_path / "docs" / "vllm.md"
    md.parent.mkdir()
    md.write_text("# vLLM\n\nA guide.\n\n" + report.KEEP_ABOVE + "\n\nold report\n")
    rc = program(
        [
            "--pairs",
            PAIR,
            "--k",
            "3",
            "--temps",
            "0",
            "0.7",
            "--drafters",
            "draft model:fp32",
            "prompt lookup",
            "--target-precision",
            "fp32",
            "--prompts",
            str(vllm_catalog),
            "--max-new-tokens",
            "16",
            "--compare-vllm",
            "--vllm-fast-start",
            "--json",
            str(out),
            "--report",
            str(md),
            "--quiet",
        ]
    )
    assert rc == 0, capsys.readouterr().err[-3000:]
    doc = json.loads(out.read_text())
    rows = doc["results"]
    vllm = [r for r in rows if r["engine"] == "vllm"]
    # per prompt and temperature: vLLM's target alone, its draft model at k = 3, its ngram
    assert {(r["method"], r["k"]) for r in vllm} == {
        ("vLLM target alone", ""),
        ("vLLM draft model", "3"),
        ("vLLM ngram", "3"),
    }
    assert len(vllm) == 3 * len(PROMPTS) * 2
    assert all(r["target_precision"] == "fp32" and r["tokens"] > 0 and r["tokens_per_s"] > 0 for r in vllm)
    assert all(r["speedup"] == 1.0 for r in vllm if r["method"] == "vLLM target alone")
    assert all(r["speedup"] > 0 for r in vllm)
    base = {
        r["category"]: r["new_tokens"]
        for r in rows
        if r["engine"] == "ours" and r["drafter"] == "target alone" and r["temperature"] == 0
    }
    for r in vllm:
        if r["temperature"] == 0:  # fp32 on both sides: token for token
            assert r["greedy_equal"] is True and r["new_tokens"] == base[r["category"]], r["method"]
    drafted = [r for r in vllm if r["method"] == "vLLM draft model" and r["temperature"] == 0]
    assert all(
        r["counters"]["num_drafts"] > 0 and len(r["counters"]["num_accepted_tokens_per_pos"]) == 3 for r in drafted
    )
    ours = [r for r in rows if r["engine"] == "ours" and r["drafter"] == "draft model"]
    assert all(set(r["counters"]) == set(drafted[0]["counters"]) for r in ours)  # the same names on both sides
    engines = doc["vllm_engines"]
    assert [e["label"] for e in engines] == ["vLLM target alone", "vLLM draft model", "vLLM ngram"]
    assert engines[2]["engine"]["speculative_config"]["prompt_lookup_max"] == 3  # our prompt lookup's max_ngram
    assert doc["vllm_error"] is None
    text = md.read_text()
    assert text.startswith("# vLLM\n\nA guide.") and "old report" not in text  # the guide kept, the report replaced
    assert "## Benchmarks" in text and "### Ours against vLLM's, per category" in text
    assert "| story | 0 | vllm | vLLM draft model | 3 |" in text and "### The vLLM engines" in text


def test_compare_vllm_without_its_environment_says_so_before_running_anything(
    vllm_catalog, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("PLAYGROUND_VLLM_VENV", str(tmp_path / "nowhere"))
    start = time.monotonic()
    assert program(["--pairs", PAIR, "--k", "3", "--prompts", str(vllm_catalog), "--compare-vllm", "--quiet"]) == 2
    assert "vLLM is not installed" in capsys.readouterr().err
    assert time.monotonic() - start < 30  # before our grid ran


def test_the_program_takes_vllms_flags_and_benchs_own_command_line_does_not(capsys):
    """`python -m playground.bench` (the program) offers vLLM's flags, as docs/ and scripts/ call them; bench's own
    command line, which imports nothing of vllm, refuses them."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "playground.bench", "--help"], cwd=root, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for flag in ("--compare-vllm", "--vllm-threads-bind", "--vllm-draft-sample", "--vllm-fast-start", "--ttft"):
        assert flag in done.stdout, flag
    with pytest.raises(SystemExit) as refused:
        bench.main(["--compare-vllm"])
    assert refused.value.code == 2 and "--compare-vllm" in capsys.readouterr().err


def test_ttft_with_compare_vllm_times_vllms_first_token_on_the_same_prompts(vllm_catalog, tmp_path, capsys):
    """--ttft --compare-vllm (scripts/amx_device.sh's call): vLLM's row beside ours, each length timed --ttft-reps
    times on the prompt token ids ours ran."""
    require_vllm()
    out = tmp_path / "ttft.json"
    argv = ["--pairs", PAIR, "--target-precision", "fp32", "--ttft", "40", "20", "--ttft-reps", "2", "--compare-vllm"]
    rc = program(argv + ["--vllm-threads-bind", "0-1", "--vllm-fast-start", "--json", str(out), "--quiet"])
    assert rc == 0, capsys.readouterr().err[-3000:]
    rows = json.loads(out.read_text())["ttft"]
    vllm = [r for r in rows if r["engine"] == "vllm"]
    ours = {r["tokens"] for r in rows if r["engine"] == "ours, target alone"}
    assert {r["tokens"] for r in vllm} == ours and len(ours) == 2
    assert all(len(r["seconds"]) == 2 and all(s > 0 for s in r["seconds"]) for r in vllm)
    assert "| vllm | " in capsys.readouterr().out


def test_a_server_gives_its_rows_on_our_prompt_tokens(vllm_server, vllm_pair, runner, allow_vllm):
    pair = PairSpec(PAIR, str(vllm_pair["target"]), str(vllm_pair["draft"]), target_precision="fp32")
    decode = DecodeConfig(max_new_tokens=16, k=3, policy=KPolicy.FIXED)
    results = bench.run_grid(
        runner, [pair], PROMPTS, [decode], [DrafterSpec.of(DrafterKind.DRAFT_MODEL, precision="fp32")]
    )
    rows, engines = vllm_peer.run_peer(
        runner, results, [pair], PROMPTS, [decode], [DrafterSpec()], VLLMEngine(url=vllm_server.base)
    )
    assert {r.method for r in rows} == {"vLLM server"} and len(rows) == len(PROMPTS)
    assert all(r.greedy_equal and r.k == "3" and r.counters["num_drafts"] > 0 for r in rows)
    assert all(r.speedup != r.speedup for r in rows)  # no target-alone server given: no speedup
    assert engines[0]["engine"]["url"] == vllm_server.base
    frame = positions_frame(results + rows)
    assert set(frame["method"]) == {"draft model (fp32)", "vLLM server"}
    assert frame["acceptance"].between(0, 1).all()


def test_a_server_of_another_tokenizer_is_named(vllm_server, vllm_pair, runner, allow_vllm, monkeypatch):
    pair = PairSpec(PAIR, str(vllm_pair["target"]), str(vllm_pair["draft"]), target_precision="fp32")
    monkeypatch.setattr(type(vllm_server), "tokenize", lambda self, text: [1, 2, 3])
    with pytest.raises(PlaygroundError, match="whose tokenizer is not the pair's target's"):
        vllm_peer.run_peer(
            Runner(),
            [],
            [pair],
            PROMPTS,
            [DecodeConfig(max_new_tokens=4)],
            [DrafterSpec()],
            VLLMEngine(url=vllm_server.base),
        )
    monkeypatch.undo()
    monkeypatch.setenv("PLAYGROUND_VLLM_URLS", allow_vllm)  # undo() took the allow-list too
    with pytest.raises(PlaygroundError, match="The target-alone server .* speculates"):
        vllm_peer.run_peer(
            runner,
            [],
            [pair],
            PROMPTS,
            [DecodeConfig(max_new_tokens=4)],
            [DrafterSpec()],
            VLLMEngine(url=vllm_server.base, target_url=vllm_server.base),
        )


# ---------------------------------------------------------------- the pure parts, by hand


def test_vllm_runs_at_the_grids_fixed_k_values_else_at_the_adaptive_starting_k():
    FIXED = KPolicy.FIXED
    assert vllm_ks(
        [DecodeConfig(k=4, policy=KPolicy.THEORY), DecodeConfig(k=2, policy=FIXED), DecodeConfig(k=6, policy=FIXED)]
    ) == [2, 6]
    assert vllm_ks([DecodeConfig(k=4, policy=KPolicy.THEORY)]) == [4]
    assert vllm_ks([DecodeConfig(k=3, tree="2-1"), DecodeConfig(k=5, policy=FIXED)]) == [5]


def test_vllms_methods_are_those_of_our_drafters_it_has():
    assert methods_for([DrafterSpec(DrafterKind.DRAFT_MODEL), DrafterSpec(DrafterKind.PROMPT_LOOKUP)]) == [
        "draft_model",
        "ngram",
    ]
    assert methods_for([DrafterSpec(DrafterKind.STAGED)]) == ["draft_model"]
    assert methods_for([DrafterSpec(DrafterKind.EARLY_EXIT), DrafterSpec(DrafterKind.CROSS_TOKENIZER)]) == []


def test_the_tabs_vllm_choice_is_read_and_checked(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_VLLM_URLS", "http://gpu-box:8000")
    assert engine_choice(vllm_peer.NO_VLLM, "http://ignored:1") is None
    assert engine_choice(vllm_peer.VLLM_HERE) == vllm_peer.HERE
    assert engine_choice(vllm_peer.VLLM_URL, " http://gpu-box:8000/v1 ", " qwen ", "") == VLLMEngine(
        url="http://gpu-box:8000", model="qwen"
    )
    with pytest.raises(PlaygroundError, match="give its URL"):
        engine_choice(vllm_peer.VLLM_URL, "  ")
    with pytest.raises(PlaygroundError, match="give it as http://host:port"):
        engine_choice(vllm_peer.VLLM_URL, "gpu-box 8000")
    with pytest.raises(PlaygroundError, match="Unknown vLLM engine choice"):
        engine_choice("ray cluster")


def result(
    engine: str,
    method: str,
    drafter: str,
    tokens: list[int],
    counters: dict | None = None,
    k: str = "3",
    category: str = "code",
    temperature: float = 0.0,
    tps: float = 10.0,
    speedup: float = 1.0,
) -> Result:
    return Result(
        pair="p",
        category=category,
        method=method,
        drafter=drafter,
        engine=engine,
        k=k,
        temperature=temperature,
        target_precision="bf16",
        draft_precision="",
        tokens=len(tokens),
        seconds=1.0,
        tokens_per_s=tps,
        speedup=speedup,
        new_tokens=tokens,
        counters=counters or {},
    )


COUNTS = {
    "num_drafts": 4,
    "num_draft_tokens": 12,
    "num_accepted_tokens": 6,
    "num_accepted_tokens_per_pos": [3, 2, 1],
    "mean_acceptance_length": 2.5,
    "draft_acceptance_rate": 0.5,
}


def test_acceptance_by_position_pools_the_prompts_of_a_configuration():
    rows = [
        result("ours", "draft model", "draft model", [1], COUNTS),
        result(
            "ours",
            "draft model",
            "draft model",
            [1],
            COUNTS | {"num_drafts": 2, "num_accepted_tokens_per_pos": [2, 2, 0]},
            category="story",
        ),
        result("vllm", "vLLM draft model", "draft model", [1], COUNTS),
        result("vllm", "vLLM target alone", "target alone", [1], {"num_drafts": 0}, k=""),
    ]
    frame = positions_frame(rows)
    ours = frame[frame["engine"] == "ours"]
    assert ours["acceptance"].round(4).tolist() == [round(5 / 6, 4), round(4 / 6, 4), round(1 / 6, 4)]
    assert frame[frame["engine"] == "vllm"]["acceptance"].tolist() == [0.75, 0.5, 0.25]
    assert positions_frame([]).empty


def test_the_report_compares_greedy_outputs_with_each_engines_target_alone():
    rows = [
        result("ours", "target alone", "target alone", [1, 2, 3, 4], k=""),
        result("ours", "draft model", "draft model", [1, 2, 3, 4], COUNTS, speedup=1.5),
        result("hf", "hf target alone", "target alone", [1, 2, 3, 4], k=""),
        result("vllm", "vLLM target alone", "target alone", [1, 2, 9, 9], k=""),
        result("vllm", "vLLM draft model", "draft model", [1, 2, 9, 9], COUNTS, speedup=1.2),
    ]
    lines = vllm_report.section(
        rows,
        [
            {
                "pair": "p",
                "label": "vLLM draft model",
                "k": "3",
                "vllm_version": "0.32.0",
                "device": "cpu",
                "load_s": 12.5,
                "engine": {"dtype": "bfloat16"},
            }
        ],
    )
    text = "\n".join(lines)
    assert "| code | 0 | ours | draft model | 3 | 10.00 | 1.50 | " in text
    assert (
        "| code | 0 | vllm | vLLM draft model | 3 | 10.00 | 1.20 |  | 2.50 | differs at 2 | differs at 2 | yes |"
        in text
    )
    assert (
        "| code | 0 | vllm | vLLM target alone |  | 10.00 | 1.00 |  |  | differs at 2 | differs at 2 | (reference) |"
        in text
    )
    assert "| vllm | vLLM draft model | 3 | 0 | 4 | 12 | 6 | [3, 2, 1] | 0.75 · 0.50 · 0.25 | 2.50 | 0.50 |" in text
    assert "| p | vLLM draft model | 3 | 0.32.0 | cpu | 12.5 |" in text
    assert vllm_report.section(rows[:3], []) == []  # no vLLM row, no section
