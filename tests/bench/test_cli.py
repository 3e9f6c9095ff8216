"""The benchmark's command line end to end on the tiny pair; bad input exits 2 naming the field."""

from __future__ import annotations

import json

import pytest

from playground import bench
from playground.models import tiny
from playground.core.config import DrafterKind


@pytest.fixture(scope="module")
def tiny_catalog_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench-cli")
    return root, tiny.write_pairs_file(root)


@pytest.fixture
def catalog(tiny_catalog_dir, monkeypatch):
    root, pairs_file = tiny_catalog_dir
    monkeypatch.setenv("PLAYGROUND_PAIRS_FILE", str(pairs_file))
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(root))
    return root


def test_cli_runs_the_grid_and_writes_json_and_report(catalog, tmp_path, capsys):
    prompts = tmp_path / "prompts.json"
    prompts.write_text(
        json.dumps(
            [{"category": "code", "prompt": "def fibonacci(n):"}, {"category": "story", "prompt": "Once upon a time"}]
        )
    )
    out = tmp_path / "bench.json"
    rc = bench.main(
        [
            "--pairs",
            "tiny (test)",
            "--k",
            "3",
            "adaptive",
            "--temps",
            "0",
            "--drafters",
            "draft model",
            "--draft-precision",
            "fp32",
            "int8",
            "--target-precision",
            "fp32",
            "--prompts",
            str(prompts),
            "--max-new-tokens",
            "8",
            "--compare-hf",
            "--json",
            str(out),
            "--report",
            str(tmp_path / "docs" / "bench.md"),
            "--quiet",
        ]
    )
    assert rc == 0
    doc = json.loads(out.read_text())
    results = doc["results"]
    ours = [r for r in results if r["engine"] == "ours" and r["drafter"] == "draft model"]
    # per prompt: 2 k x 2 draft precisions of ours; the baseline; HF: target alone, same draft at k = 3 and
    # heuristic, HF defaults, each per draft precision
    assert len(ours) == 2 * 2 * 2
    assert {(r["method"], r["draft_precision"]) for r in ours} == {
        ("draft model (fp32)", "fp32"),
        ("draft model (int8)", "int8"),
    }
    assert len(results) == 2 * (1 + 4 + 1 + 2 * 3)
    assert all(r["target_precision"] == "fp32" for r in results)
    assert all(r["greedy_equal"] for r in results if r["method"] != "target alone")
    assert all(r["tokens"] == 8 and r["speedup"] > 0 and r["vs_best_hf"] > 0 for r in ours)
    assert [t["name"] for t in doc["targets"]] == [t["name"] for t in bench.targets.load_targets()]
    assert doc["environment"]["commit"] is not None
    printed = capsys.readouterr().out
    assert "| code | draft model (int8) | 3 | 0.00 | fp32 | int8 | 8 |" in printed
    assert "median |predicted - measured| / measured" in printed
    md = (tmp_path / "docs" / "bench.md").read_text()
    assert "## Geometric mean over categories" in md and "## Targets" in md
    assert (tmp_path / "docs" / "figures" / "bench-speedup_vs_k.html").stat().st_size > 1000


def test_reps_run_the_grid_again_in_another_order_and_keep_each_rows_median_repeat(
    catalog, tmp_path, monkeypatch, capsys
):
    """--reps 3: three real runs of the grid (each prompt's order rotated by one more each time); every row written
    is one repeat's row, its speedup the median of the three; --reps 0 is refused before anything runs."""
    from playground.bench import cli

    runs, real = [], cli.run_grid

    def kept(*args, **kwargs):
        runs.append((kwargs["rotate"], real(*args, **kwargs)))
        return runs[-1][1]

    monkeypatch.setattr(cli, "run_grid", kept)
    out = tmp_path / "reps.json"
    common = ["--pairs", "tiny (test)", "--k", "2", "3", "--temps", "0", "--target-precision", "fp32"]
    common += ["--draft-precision", "fp32", "--max-new-tokens", "6", "--quiet"]
    assert bench.main([*common, "--reps", "3", "--json", str(out)]) == 0
    assert [r for r, _ in runs] == [0, 1, 2]
    rows = json.loads(out.read_text())["results"]
    assert len(rows) == len(runs[0][1]) == len(runs[2][1])
    for i, row in enumerate(rows):
        repeats = sorted(run[i].speedup if run[i].method != "target alone" else run[i].tokens_per_s for _, run in runs)
        mine = row["speedup"] if row["method"] != "target alone" else row["tokens_per_s"]
        assert mine == repeats[1], row["method"]
    capsys.readouterr()
    assert bench.main([*common, "--reps", "0"]) == 2
    assert "--reps" in capsys.readouterr().err and len(runs) == 3


def test_cli_runs_trees_and_staged_drafting_next_to_the_chains(catalog, tmp_path, capsys):
    out, md = tmp_path / "trees.json", tmp_path / "docs" / "bench.md"
    rc = bench.main(
        [
            "--pairs",
            "tiny (test)",
            "--k",
            "2",
            "--tree",
            "2-1",
            "--drafters",
            "draft model",
            "staged",
            "--target-precision",
            "fp32",
            "--draft-precision",
            "fp32",
            "--categories",
            "story",
            "--max-new-tokens",
            "8",
            "--json",
            str(out),
            "--report",
            str(md),
            "--quiet",
        ]
    )
    assert rc == 0
    ours = [r for r in json.loads(out.read_text())["results"] if r["engine"] == "ours" and r["k"]]
    assert sorted((r["drafter"], r["k"], r["tree"]) for r in ours) == [
        ("draft model", "2", ""),
        ("draft model", "tree 2-1", "2-1"),
        (DrafterKind.STAGED.value, "2", ""),
    ]
    assert all(r["greedy_equal"] and r["nodes"] > 0 and r["depth_acceptance"] for r in ours)
    assert "| nodes | mean_accepted |" in capsys.readouterr().out
    assert "## Acceptance by depth" in md.read_text() and "| draft model (fp32) | tree 2-1 | 0.00 |" in md.read_text()


def test_cli_runs_the_draft_free_drafters_on_the_repetitive_workload(catalog, tmp_path, capsys, monkeypatch):
    """The lead's command, on the tiny pair: suffix, lookahead, prompt lookup and the draft model on a category
    of the six and on the repetitive workload's categories, each against the target alone, greedy equal. (The
    shipped prompts are longer than the tiny models' 512 positions: their last 300 characters stand in.)"""
    from playground.bench import prompts

    shipped = json.loads(prompts.REPETITIVE.read_text())
    short = tmp_path / "repetitive.json"
    short.write_text(json.dumps([item | {"prompt": item["prompt"][-300:]} for item in shipped]))
    monkeypatch.setattr(prompts, "REPETITIVE", short)
    out = tmp_path / "draftfree.json"
    rc = bench.main(
        [
            "--pairs",
            "tiny (test)",
            "--k",
            "4",
            "--repetitive",
            "--drafters",
            "suffix",
            "lookahead:W=4,N=3,G=2",
            "prompt lookup",
            "draft model",
            "--categories",
            "code",
            "code edits",
            "chat quoting",
            "--target-precision",
            "fp32",
            "--draft-precision",
            "fp32",
            "--max-new-tokens",
            "8",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    ours = [r for r in json.loads(out.read_text())["results"] if r["engine"] == "ours" and r["k"]]
    assert {(r["category"], r["drafter"]) for r in ours} == {
        (c, d)
        for c in ("code", "code edits", "chat quoting")
        for d in ("suffix decoding", "lookahead decoding", "prompt lookup", "draft model")
    }
    assert all(r["greedy_equal"] and r["tokens"] == 8 and r["speedup"] > 0 for r in ours)
    assert "lookahead decoding (W = 4, N = 3, G = 2)" in capsys.readouterr().out


def test_the_repetitive_workload_repeats_itself():
    from playground.bench.prompts import load_prompts

    prompts = load_prompts(None, ["code edits", "chat quoting"], repetitive=True)
    code = prompts["code edits"]
    assert code.count("def column_total") == 2 and code.count("def read_rows(") == 3  # three versions of one file
    assert prompts["chat quoting"].count("Speculative decoding lets a small draft model") == 2  # it quotes itself
    assert "code edits" not in load_prompts(None)  # only when asked


def test_record_overhead_runs_both_ways_through_the_runner(catalog, tmp_path, capsys):
    out = tmp_path / "overhead.json"
    assert (
        bench.main(
            [
                "--pairs",
                "tiny (test)",
                "--k",
                "3",
                "--record-overhead",
                "2",
                "--max-new-tokens",
                "6",
                "--json",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    o = json.loads(out.read_text())["record_overhead"]
    assert len(o["runs_on"]) == len(o["runs_off"]) == 2 and o["record_on_tps"] > 0 and o["record_off_tps"] > 0
    assert o["target_precision"] == "fp32"
    assert "instrumentation costs" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--k", "0"], "--k"),
        (["--k", "sometimes"], "--k"),
        (["--temps", "3"], "--temps"),
        (["--temps", "warm"], "--temps"),
        (["--drafters", "early exit:seven"], "layer"),
        (["--drafters", "draft model:int2"], "draft precision"),
        (["--drafters", "beam search"], "Unknown drafter"),
        (["--target-precision", "int8"], "target precision"),
        (["--target-precision", "fp8"], "target precision"),
        (["--draft-precision", "fp4"], "draft precision"),
        (["--max-new-tokens", "0"], "max_new_tokens"),
        (["--pairs", "no such pair"], "Unknown model pair"),
        (["--categories", "poetry"], "--categories"),
        (["--record-overhead", "0"], "--record-overhead"),
        (["--tree", "3-x"], "tree: write children per depth"),
        (["--confidence", "1.5"], "draft confidence threshold"),
    ],
)
def test_bad_input_exits_2_naming_the_field(catalog, capsys, argv, field):
    base = ["--pairs", "tiny (test)"] if "--pairs" not in argv else []
    assert bench.main(base + argv + ["--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and field in err


def test_unparseable_numbers_are_argparse_errors(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--max-new-tokens", "many"])
    assert exit_.value.code == 2 and "--max-new-tokens" in capsys.readouterr().err


def test_drafter_names_and_precisions_make_a_grid(monkeypatch):
    from playground.bench.cli import drafter_specs
    from playground.core.config import DrafterKind, Precision

    monkeypatch.setenv("PLAYGROUND_DEVICE", "cpu")
    specs = drafter_specs(["draft model", "draft model:bf16", "early exit:7", "prompt lookup"], ["int8", "fp32"])
    assert [(d.kind, d.precision, getattr(d.options, "exit_layer", None)) for d in specs] == [
        (DrafterKind.DRAFT_MODEL, Precision.INT8, None),
        (DrafterKind.DRAFT_MODEL, Precision.FP32, None),
        (DrafterKind.DRAFT_MODEL, Precision.BF16, None),
        (DrafterKind.EARLY_EXIT, None, 7),
        (DrafterKind.PROMPT_LOOKUP, None, None),
    ]
    assert drafter_specs(["draft model"], None)[0].precision is None  # the device default, at load time


def test_cli_ttft_times_the_first_token_of_every_engine_on_prompts_of_the_asked_lengths(catalog, tmp_path, capsys):
    out = tmp_path / "ttft.json"
    rc = bench.main(
        [
            "--pairs",
            "tiny (test)",
            "--target-precision",
            "fp32",
            "--ttft",
            "160",
            "80",
            "--ttft-reps",
            "2",
            "--ttft-draft-ab",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    rows = json.loads(out.read_text())["ttft"]
    spec = {"ours, speculative", "ours, speculative, whole prompt drafted"}  # the second: --ttft-draft-ab's
    engines = {"ours, target alone", "hf generate (same object)", "stock transformers", *spec}
    assert {r["engine"] for r in rows} == engines
    for r in rows:  # a speculative round's draft part, per timing, and its share of the round
        drafts = len(r["draft_s"]) == 2 and all(0 < d < s for d, s in zip(r["draft_s"], r["seconds"]))
        assert drafts and 0 < r["draft_share"] < 1 if r["engine"] in spec else r["draft_share"] is None
    lengths = sorted({r["tokens"] for r in rows})
    assert len(lengths) == 2 and 70 < lengths[0] <= 80 and 150 < lengths[1] <= 160  # the prompts' real lengths
    assert all(len(r["seconds"]) == 2 and all(s > 0 for s in r["seconds"]) for r in rows)
    table = capsys.readouterr().out
    assert f"| engine | {lengths[0]} tokens | {lengths[1]} tokens |" in table
    assert "x ours)" in table.split("| hf generate (same object) |")[1].splitlines()[0]
    assert "%)" in table.split("| ours, speculative |")[1].splitlines()[0]  # (draft 0.01 s, 12%)


def test_cli_ttft_refuses_a_prompt_too_short_to_time(catalog, capsys):
    assert bench.main(["--pairs", "tiny (test)", "--ttft", "3", "--quiet"]) == 2
    assert "--ttft takes prompt lengths of at least 8 tokens" in capsys.readouterr().err
