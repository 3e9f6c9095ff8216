"""The three challenge sweeps on the tiny pair: their frames, every greedy output checked, the memory budget and
the context window refused before anything runs, and the command line's report."""

from __future__ import annotations

import json

import pytest

from playground.bench import challenges, memory
from playground.bench.cli import main
from playground.core.errors import PlaygroundError
from playground.models.cache import model_bytes
from playground.core.config import BASELINE, SPECULATIVE
from tests.helpers import load_pair


@pytest.fixture
def spec(tiny_spec):
    return tiny_spec(k=3, max_new_tokens=10)


def test_batch_sweep_measures_both_methods_at_each_size_and_checks_every_sequence(runner, spec):
    seen = []
    frame = challenges.batch_sweep(runner, spec, [3, 1, 2], progress=lambda message, fraction: seen.append(message))
    assert list(frame["batch_size"]) == [1, 1, 2, 2, 3, 3]
    assert list(frame["method"]) == [BASELINE, SPECULATIVE] * 3
    assert list(frame["sequences"]) == list(frame["batch_size"])
    assert frame["greedy_equal"].all() and (frame["real_differences"] == 0).all()
    assert sum("solo target alone" in m for m in seen) == 3  # each of the 3 prompts' own reference run
    for size in (1, 2, 3):
        rows = frame[frame["batch_size"] == size].set_index("method")
        assert rows.loc[BASELINE, "speedup"] == 1.0
        assert rows.loc[SPECULATIVE, "speedup"] == pytest.approx(
            rows.loc[SPECULATIVE, "tokens_per_s"] / rows.loc[BASELINE, "tokens_per_s"]
        )
        assert rows.loc[SPECULATIVE, "tokens"] == rows.loc[BASELINE, "tokens"]  # the same outputs, so the same count
        assert 0 <= rows.loc[SPECULATIVE, "alpha"] <= 1 and rows.loc[SPECULATIVE, "k"] == 3
    assert (frame["tokens_per_s"] == frame["tokens"] / frame["seconds"]).all()


def test_each_batch_output_is_compared_with_its_own_prompts_solo_run(runner, spec, monkeypatch):
    """The check can fail: with the prompts' solo references shifted by one, sequences no longer match."""
    real = challenges._batch_row

    def shifted(result, size, k, solo, precision, exact):
        return real(result, size, k, solo[1:] + solo[:1], precision, exact)

    monkeypatch.setattr(challenges, "_batch_row", shifted)
    frame = challenges.batch_sweep(runner, spec, [2])
    assert not frame["greedy_equal"].any() and (frame["real_differences"] > 0).all()


def test_kv_bytes_per_token_from_the_config(runner, spec):
    loaded = load_pair(runner, spec)
    # the tiny target: 2 layers, 2 KV heads of 64 / 4 = 16 dimensions, fp32: keys and values
    assert memory.kv_bytes_per_token(loaded.target) == 2 * 2 * 2 * 16 * 4
    one, sixteen = (memory.memory_need(loaded, rows, 100, 10, 3) for rows in (1, 16))
    assert sixteen.kv > 16 * one.kv  # more rows, and each may carry holes
    assert one.kv == (100 + 10 + 3) * (
        memory.kv_bytes_per_token(loaded.target) + memory.kv_bytes_per_token(loaded.draft)
    )


def test_a_batch_over_the_memory_budget_is_refused_before_anything_runs(runner, spec, monkeypatch):
    loaded = load_pair(runner, spec)
    weights = model_bytes(loaded.target) + model_bytes(loaded.draft)
    longest = max(len(challenges.encode_prompt(loaded.tokenizer, p)[0]) for p in challenges.BATCH_PROMPTS[:64])
    fits = memory.memory_need(loaded, 1, longest, 10, 3).total
    monkeypatch.setenv("PLAYGROUND_MEMORY_GB", str((weights + 4 * fits) / 2**30))
    seen = []
    with pytest.raises(PlaygroundError, match=r"Batch size 64 .* would not fit: it needs about .* GB .* KV cache"):
        challenges.batch_sweep(runner, spec, [1, 64], progress=lambda message, fraction: seen.append(message))
    assert not any("solo" in m or "batch" in m or "Warming" in m for m in seen)
    frame = challenges.batch_sweep(runner, spec, [1])  # the size that fits runs under the same budget
    assert frame["greedy_equal"].all()


def test_context_sweep_on_the_long_document(runner, spec):
    frame = challenges.context_sweep(runner, spec, [64, 16, 160])
    assert list(frame["context"]) == [16, 64, 160]  # exact prompt lengths, shortest first
    assert frame["greedy_equal"].all()
    kv = frame["kv_mib_target"] + frame["kv_mib_draft"]
    assert kv.is_monotonic_increasing
    assert ((kv <= frame["kv_mib_estimate"]) & (kv >= 0.9 * frame["kv_mib_estimate"])).all()
    assert (frame["speedup"] == frame["tokens_per_s"] / frame["baseline_tokens_per_s"]).all()
    assert frame[["alpha", "c", "v", "draft_ms_per_token", "verify_ms_per_round", "prompt_pass_s"]].notna().all().all()


def test_context_beyond_the_window_is_refused(runner, spec):
    with pytest.raises(PlaygroundError, match="context window is 512 tokens"):
        challenges.context_sweep(runner, spec, [64, 600])
    with pytest.raises(PlaygroundError, match=r"The built-in document has \d+ tokens for this tokenizer"):
        challenges.context_sweep(runner, spec, [16, 400], document="x " * 30)


def test_precision_grid_compares_each_draft_with_the_target_alone_at_its_target_precision(runner, spec):
    frame = challenges.precision_grid(runner, spec, ["fp32", "bf16"], ["fp32", "int8"])
    assert len(frame) == 2 * (1 + 2)
    ours = frame[frame["method"] != BASELINE]
    assert sorted(zip(ours["target_precision"], ours["draft_precision"])) == [
        ("bf16", "fp32"),
        ("bf16", "int8"),
        ("fp32", "fp32"),
        ("fp32", "int8"),
    ]
    fp32 = ours[ours["target_precision"] == "fp32"]
    assert fp32["greedy_equal"].all()  # bf16 may flip a near-tie of a tiny random model: then it must say so
    bf16 = ours[ours["target_precision"] == "bf16"]
    assert (bf16["greedy_equal"].astype(bool) | bf16["near_tie"].astype(bool)).all()
    assert frame[frame["method"] == BASELINE]["speedup"].tolist() == [1.0, 1.0]


def test_challenges_refuse_a_drafter_without_the_pairs_draft_model(runner, tiny_spec):
    spec = tiny_spec(drafter="prompt lookup")
    for sweep, sizes in ((challenges.batch_sweep, [1]), (challenges.context_sweep, [16])):
        with pytest.raises(PlaygroundError, match="runs the pair's draft model"):
            sweep(runner, spec, sizes)
    with pytest.raises(PlaygroundError, match="Batch sizes must be whole numbers from 1 to 64"):
        challenges.batch_sweep(runner, tiny_spec(), [0, 2])


def test_the_command_line_writes_the_report_and_the_json(tiny_catalog, tmp_path, capsys):
    report, data = tmp_path / "challenges.md", tmp_path / "challenges.json"
    code = main(
        [
            "--pairs",
            "tiny (test)",
            "--challenges",
            "batch",
            "context",
            "precision",
            "--batch-sizes",
            "1",
            "2",
            "--context-lengths",
            "16",
            "32",
            "--target-precision",
            "fp32",
            "--draft-precision",
            "fp32",
            "--max-new-tokens",
            "6",
            "--k",
            "2",
            "--report",
            str(report),
            "--json",
            str(data),
            "--quiet",
        ]
    )
    assert code == 0
    text = report.read_text()
    for section in ("## Batch size", "## Context length", "## Precision", "arXiv:2411.13157", "llama.cpp PR 5625"):
        assert section in text
    assert (tmp_path / "figures" / "challenge_batch_size.html").exists()
    doc = json.loads(data.read_text())
    assert [r["batch_size"] for r in doc["results"]["batch size"]] == [1, 1, 2, 2]
    assert {r["k"] for r in doc["results"]["context length"]} == {2}
    assert main(["--pairs", "tiny (test)", "--challenges", "batch", "--batch-sizes", "0", "--quiet"]) == 2
    assert "Batch sizes must be whole numbers" in capsys.readouterr().err


def test_the_challenges_and_vllm_read_the_defaults_instead_of_copying_them():
    """No default copied by hand (issue 56): the challenges' fixed k and vLLM's request start at DecodeConfig's k, and
    vLLM's ngram and HF's prompt lookup at prompt lookup's own Options."""
    from playground import decoding
    from playground.bench.challenges_cli import challenge_k
    from playground.core.config import DecodeConfig
    from playground.vllm.engine import VLLMRequest

    assert challenge_k(["x"], ["x"]) == DecodeConfig().k == VLLMRequest(target="t").k
    assert challenge_k(["5"], ["x"]) == 5
    lookup = decoding.strategy(decoding.benched("vllm", "ngram"))
    ngram = VLLMRequest(target="t", method="ngram").speculative_config()  # the registry's builder, at the defaults
    assert ngram["prompt_lookup_max"] == lookup.options().max_ngram
    from playground.bench.hf import configs_for
    from playground.run.spec import DrafterSpec

    (hf,) = configs_for(DrafterSpec(lookup.kind), DecodeConfig())  # HF's peer of it, too
    assert dict(hf.arguments)["max_matching_ngram_size"] == lookup.options().max_ngram
