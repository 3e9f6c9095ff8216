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
