"""The benchmark CLI end to end on the tiny pair (speed itself is never asserted)."""
import json

from playground import bench, tiny


def test_bench_cli_writes_every_run(tmp_path, monkeypatch, capsys):
    pairs_file = tiny.write_pairs_file(tmp_path)
    monkeypatch.setenv("PLAYGROUND_PAIRS_FILE", str(pairs_file))
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path))
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([{"category": "code", "prompt": "def fibonacci(n):"},
                                   {"category": "story", "prompt": "Once upon a time"}]))
    out = tmp_path / "bench.json"
    rc = bench.main(["--pairs", "tiny (test)", "--k", "3", "adaptive", "--temps", "0", "1", "--drafters",
                     "draft model", "prompt lookup", "--prompts", str(prompts), "--max-new-tokens", "12",
                     "--compare-hf", "--json", str(out), "--report", str(tmp_path / "docs" / "bench.md"), "--quiet"])
    assert rc == 0
    doc = json.loads(out.read_text())
    results = doc["results"]
    # per prompt and temperature: 2 baselines + 2 drafters x 2 k x (ours + HF)
    assert len(results) == 2 * 2 * (2 + 2 * 2 * 2)  # per prompt x temperature: 2 baselines, 2 k x 2 drafters x (ours + HF)
    greedy = [r for r in results if r["temperature"] == 0 and r["method"] != "target alone"]
    assert greedy and all(r["greedy_equal"] for r in greedy)  # ours and HF's all equal the target alone
    ours = [r for r in results if r["method"] == "draft model"]
    assert all(r["tokens"] == 12 and r["speedup"] > 0 and r["vs_hf"] > 0 for r in ours)
    assert all(0 <= r["alpha"] <= 1 for r in ours)
    assert doc["environment"]["commit"] is not None
    assert "| tiny (test) | code | draft model | 3 |" in capsys.readouterr().out
    md = (tmp_path / "docs" / "bench.md").read_text()
    assert "## Mean over prompts" in md and "| draft model | 3 | 0.00 |" in md
    assert (tmp_path / "docs" / "figures" / "speedup_vs_k.html").stat().st_size > 1000


def test_bench_rejects_bad_arguments(capsys):
    assert bench.main(["--k", "0", "--quiet"]) == 2
    assert "--k takes whole numbers" in capsys.readouterr().err
    assert bench.main(["--pairs", "no such pair", "--quiet"]) == 2
    assert "Unknown model pair" in capsys.readouterr().err


def test_targets_are_checked_against_the_run():
    def r(category, method, k, speedup, theory=2.0):
        return bench.Result(pair="p", category=category, method=method, k=k, temperature=0.0, tokens=10, wall_s=1.0,
                            tokens_per_s=speedup, speedup=speedup, theory_speedup=theory)

    results = [r("code", "target alone", "", 1.0), r("story", "target alone", "", 1.0),
               r("code", "draft model", "adaptive", 1.8, theory=2.0), r("story", "draft model", "adaptive", 0.9, theory=1.0),
               r("code", "hf assisted", "adaptive", 1.2), r("story", "hf assisted", "adaptive", 0.8)]

    rows = bench.targets(results)
    assert rows[0]["met"] is True and abs(rows[0]["value"] - 1.8) < 1e-9  # code 1.8 >= 1.6
    assert rows[1]["met"] is False and abs(rows[1]["value"] - 0.9) < 1e-9  # story adaptive 0.9 < 1.1
    assert rows[2]["met"] is False  # worst category 0.9 < 0.95
    assert abs(rows[3]["value"] - (1.8 / 1.2 + 0.9 / 0.8) / 2) < 1e-9 and rows[3]["met"] is True
    assert abs(rows[4]["value"] - 0.9 / 0.8) < 1e-9 and rows[4]["met"] is False
    assert abs(rows[5]["value"] - (0.9 + 0.9) / 2) < 1e-9 and rows[5]["met"] is True  # 1.8/2.0 and 0.9/1.0
    assert len(rows) == 6


def test_record_overhead_runs_both_ways(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLAYGROUND_PAIRS_FILE", str(tiny.write_pairs_file(tmp_path)))
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path))
    out = tmp_path / "overhead.json"
    assert bench.main(["--pairs", "tiny (test)", "--k", "3", "--record-overhead", "2", "--max-new-tokens", "8",
                       "--json", str(out), "--quiet"]) == 0
    o = json.loads(out.read_text())["record_overhead"]
    assert len(o["runs_on"]) == len(o["runs_off"]) == 2 and o["record_on_tps"] > 0 and o["record_off_tps"] > 0
    assert "instrumentation costs" in capsys.readouterr().out


def test_bench_drafter_names(capsys):
    assert bench.split_drafter("draft model") == ("draft model", "fp32")
    assert bench.split_drafter("draft model:int8") == ("draft model", "int8")
    assert bench.split_drafter("early exit") == ("early exit", "")
    assert bench.split_drafter("early exit:7") == ("early exit", "7")
    assert bench.main(["--drafters", "early exit:seven", "--quiet"]) == 2
    assert ":L (a layer) for early exit" in capsys.readouterr().err
    assert bench.main(["--drafters", "draft model:int4", "--quiet"]) == 2
