"""The exported HF / vLLM code, from a RunSpec: it parses, runs (against stand-ins for torch,
transformers and vLLM that record what they are asked), carries the run's settings and precisions,
and embeds user text only as string literals. No network, no models."""

from __future__ import annotations

import ast
import json
import shlex
import sys
import types

import pytest

from playground import decoding
from playground.core.errors import PlaygroundError
from playground.decoding.strategies import prompt_lookup
from playground.core.config import DecodeConfig, DrafterKind, KPolicy
from playground.run.spec import DrafterSpec, PairSpec, RunSpec, options_of
from playground.views.export_code import hf_generate_code, hub_id, vllm_code, vllm_config, vllm_serve_command

TARGET, DRAFT = "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"
HOSTILE = 'x"); import os; os.system("rm -rf /") #\n'
ALLOWED_IMPORTS = {"torch", "transformers", "vllm"}
DRAFTERS = [
    DrafterKind.DRAFT_MODEL,
    DrafterKind.PROMPT_LOOKUP,
    DrafterKind.EARLY_EXIT,
    DrafterKind.CROSS_TOKENIZER,
    DrafterKind.STAGED,
]


def make(
    drafter: DrafterKind = DrafterKind.DRAFT_MODEL,
    *,
    precision=None,
    exit_layer=None,
    max_ngram=3,
    target=TARGET,
    draft=DRAFT,
    target_precision=None,
    prompt="Hello",
    chat=True,
    **decode,
) -> RunSpec:
    return RunSpec(
        PairSpec("pair", target, draft, target_precision),
        DrafterSpec(
            drafter, options_of(drafter, dict(precision=precision, exit_layer=exit_layer, max_ngram=max_ngram))
        ),
        DecodeConfig(**{"max_new_tokens": 64, "policy": KPolicy.FIXED, **decode}),  # the defaults before issue 45
        prompt,
        chat,
    )


# ---------------------------------------------------------------- stand-ins that record the calls


class Recorder:
    def __init__(self):
        self.loaded: dict[str, object] = {}  # model id -> dtype
        self.generate: dict = {}
        self.quantized: list = []
        self.llm: dict = {}
        self.params: dict = {}
        self.asked: list[str] = []
        self.models: dict[str, FakeModel] = {}  # model id -> the model last loaded from it
        self.tokenizers: dict[str, FakeTokenizer] = {}
        self.generating: FakeModel | None = None  # the model whose generate() ran


class FakeInputs(dict):
    def to(self, device):
        return self


class FakeTokenizer:
    chat_template = "{{ messages }}"

    def __init__(self, rec):
        self.rec = rec

    def apply_chat_template(self, messages, **kw):
        self.rec.asked.append("chat:" + messages[0]["content"])
        return FakeInputs(input_ids=types.SimpleNamespace(shape=(1, 3)))

    def __call__(self, prompt, **kw):
        self.rec.asked.append("raw:" + prompt)
        return FakeInputs(input_ids=types.SimpleNamespace(shape=(1, 3)))

    def decode(self, ids, skip_special_tokens=False):
        return "generated"


class FakeModel:
    def __init__(self, rec):
        self.rec, self.model = rec, "decoder"
        self.generation_config = types.SimpleNamespace()

    def to(self, device):
        self.device = device
        return self

    def generate(self, **kw):
        kw.pop("input_ids", None)
        self.rec.generate, self.rec.generating = kw, self
        return FakeOutput()


class FakeOutput:
    def __getitem__(self, index):
        assert index == (0, slice(3, None))  # the first sequence, after the prompt's 3 tokens
        return [1, 2]


def fake_modules(rec: Recorder) -> dict[str, types.ModuleType]:
    torch = types.ModuleType("torch")
    torch.float32, torch.bfloat16, torch.float16, torch.qint8 = "float32", "bfloat16", "float16", "qint8"
    torch.cuda = types.SimpleNamespace(is_available=lambda: False)
    torch.nn = types.SimpleNamespace(Linear="Linear")
    ao, quantization = types.ModuleType("torch.ao"), types.ModuleType("torch.ao.quantization")
    quantization.per_channel_dynamic_qconfig = "per-channel"

    def quantize_dynamic(module, spec, dtype):
        rec.quantized.append((module, spec, dtype))
        return "quantized " + module

    quantization.quantize_dynamic = quantize_dynamic
    torch.ao, ao.quantization = ao, quantization

    transformers = types.ModuleType("transformers")

    def load_model(model_id, dtype=None):
        rec.loaded[model_id] = dtype
        rec.models[model_id] = FakeModel(rec)
        return rec.models[model_id]

    def load_tokenizer(model_id):
        rec.tokenizers[model_id] = FakeTokenizer(rec)
        return rec.tokenizers[model_id]

    transformers.AutoModelForCausalLM = types.SimpleNamespace(from_pretrained=load_model)
    transformers.AutoTokenizer = types.SimpleNamespace(from_pretrained=load_tokenizer)

    vllm = types.ModuleType("vllm")

    class LLM:
        def __init__(self, **kw):
            rec.llm = kw

        def get_tokenizer(self):
            return FakeTokenizer(rec)

        def chat(self, messages, params):
            rec.asked.append("chat:" + messages[0]["content"])
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text="generated")])]

        def generate(self, prompts, params):
            rec.asked.append("raw:" + prompts[0])
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text="generated")])]

    vllm.LLM = LLM
    vllm.SamplingParams = lambda **kw: rec.params.update(kw)
    return {
        "torch": torch,
        "torch.ao": ao,
        "torch.ao.quantization": quantization,
        "transformers": transformers,
        "vllm": vllm,
    }


@pytest.fixture
def execute(monkeypatch, capsys):
    """execute(code) -> Recorder: runs the snippet against the stand-ins; it must print the output."""

    def run(code: str) -> Recorder:
        rec = Recorder()
        for name, module in fake_modules(rec).items():
            monkeypatch.setitem(sys.modules, name, module)
        exec(compile(code, "<exported>", "exec"), {"__name__": "__main__"})  # run as a script, as vLLM needs
        assert capsys.readouterr().out == "generated\n"
        return rec

    return run


def imported(code: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    return names


# ---------------------------------------------------------------- Hugging Face


def test_a_draft_model_run_exports_assisted_generation(execute):
    code = hf_generate_code(make(k=5, max_new_tokens=50))
    rec = execute(code)
    assert imported(code) <= ALLOWED_IMPORTS
    assert rec.loaded == {TARGET: "auto", DRAFT: "auto"}
    kw = rec.generate
    assert isinstance(kw.pop("assistant_model"), FakeModel)
    assert kw == {"max_new_tokens": 50, "do_sample": False, "repetition_penalty": 1.0}
    assert "assistant.generation_config.num_assistant_tokens = 5" in code
    assert "assistant.generation_config.num_assistant_tokens_schedule = 'constant'" in code


def test_a_cross_tokenizer_run_exports_universal_assisted_generation(execute):
    code = hf_generate_code(
        make(DrafterKind.CROSS_TOKENIZER, k=3, max_new_tokens=20, draft="HuggingFaceTB/SmolLM2-135M")
    )
    rec = execute(code)
    assert rec.loaded == {TARGET: "auto", "HuggingFaceTB/SmolLM2-135M": "auto"}
    kw = rec.generate
    assert isinstance(kw.pop("assistant_model"), FakeModel)
    assert kw.pop("tokenizer") is not kw.pop("assistant_tokenizer")  # the target's and the draft's own
    assert kw == {"max_new_tokens": 20, "do_sample": False, "repetition_penalty": 1.0}
    assert "vocabulary" in vllm_code(make(DrafterKind.CROSS_TOKENIZER))  # no vLLM equivalent claimed


@pytest.mark.parametrize(
    "policy, schedule",
    [("fixed", "constant"), ("heuristic", "heuristic"), ("theory", "heuristic"), ("confidence", "constant")],
)
def test_the_k_policy_becomes_the_assistant_schedule(policy, schedule):
    code = hf_generate_code(make(policy=policy))
    assert f"assistant.generation_config.num_assistant_tokens_schedule = {schedule!r}" in code
    assert ("assistant_confidence_threshold = 0.4" in code) == (policy == "confidence")


@pytest.mark.parametrize("drafter", [DrafterKind.DRAFT_MODEL, DrafterKind.EARLY_EXIT])
def test_a_tree_run_says_hf_and_vllm_have_no_token_trees(execute, drafter):
    spec = make(drafter, exit_layer=6, k=3, tree="3-2-1-1")
    code = hf_generate_code(spec)
    assert "token tree (3-2-1-1); transformers has no token trees" in code and "a chain (here of k = 3)" in code
    execute(code)  # still the runnable chain export
    assert "tree" not in hf_generate_code(make(drafter, exit_layer=6, k=3))  # a chain run says nothing of trees
    if drafter is DrafterKind.DRAFT_MODEL:
        assert "token tree (3-2-1-1); vLLM drafts a chain here" in vllm_code(spec)
        assert execute(vllm_code(spec)).llm["speculative_config"] == {
            "method": "draft_model",
            "model": DRAFT,
            "num_speculative_tokens": 3,
        }


def test_a_staged_run_exports_the_draft_model_alone_and_says_so(execute):
    spec = make(DrafterKind.STAGED, k=5, precision="int8")
    code = hf_generate_code(spec)
    rec = execute(code)
    assert "staged drafting (prompt lookup drafting for the draft model) has no transformers equivalent" in code
    assert isinstance(rec.generate["assistant_model"], FakeModel) and rec.quantized
    assert "assistant.generation_config.num_assistant_tokens = 5" in code
    vllm = vllm_code(spec)
    assert "has no vLLM equivalent" in vllm
    assert execute(vllm).llm["speculative_config"] == {
        "method": "draft_model",
        "model": DRAFT,
        "num_speculative_tokens": 5,
    }


def test_the_theory_policy_says_it_has_no_transformers_equivalent():
    assert "'adaptive (theory)' k has no transformers equivalent" in hf_generate_code(make(policy="theory"))
    assert "no transformers equivalent" not in hf_generate_code(make(policy="heuristic"))


def test_a_prompt_lookup_run_exports_prompt_lookup_with_its_ngram_size(execute):
    code = hf_generate_code(make(DrafterKind.PROMPT_LOOKUP, k=7, max_ngram=2, draft=None))
    rec = execute(code)
    assert rec.generate == {
        "prompt_lookup_num_tokens": 7,
        "max_matching_ngram_size": 2,
        "max_new_tokens": 64,
        "do_sample": False,
        "repetition_penalty": 1.0,
    }
    assert list(rec.loaded) == [TARGET]
    assert "assistant" not in code


def test_an_early_exit_run_exports_its_layer(execute):
    code = hf_generate_code(make(DrafterKind.EARLY_EXIT, exit_layer=6, k=3))
    rec = execute(code)
    assert rec.generate["assistant_early_exit"] == 6
    assert list(rec.loaded) == [TARGET]
    assert "model.generation_config.num_assistant_tokens = 3" in code
    assert "LayerSkip" in code


def test_early_exit_at_the_default_layer_takes_the_resolved_layer(execute):
    rec = execute(hf_generate_code(make(DrafterKind.EARLY_EXIT), exit_layer=2))
    assert rec.generate["assistant_early_exit"] == 2


def test_early_exit_without_a_known_layer_is_refused():
    with pytest.raises(PlaygroundError, match="exit layer"):
        hf_generate_code(make(DrafterKind.EARLY_EXIT))


def test_the_target_alone_exports_plain_generation(execute):
    rec = execute(hf_generate_code(make(DrafterKind.TARGET_ALONE, max_new_tokens=9)))
    assert rec.generate == {"max_new_tokens": 9, "do_sample": False, "repetition_penalty": 1.0}


def test_sampling_settings_are_carried_with_top_k_off_explicitly(execute):
    rec = execute(hf_generate_code(make(DrafterKind.PROMPT_LOOKUP, temperature=0.8, top_p=0.9)))
    assert rec.generate["do_sample"] is True
    assert (rec.generate["temperature"], rec.generate["top_p"], rec.generate["top_k"]) == (0.8, 0.9, 0)


def test_a_top_k_is_carried(execute):
    rec = execute(hf_generate_code(make(DrafterKind.PROMPT_LOOKUP, temperature=1.0, top_k=20)))
    assert rec.generate["top_k"] == 20


def test_greedy_runs_export_no_sampling_parameters(execute):
    rec = execute(hf_generate_code(make(temperature=0.0, top_p=0.5)))
    assert rec.generate["do_sample"] is False
    assert "temperature" not in rec.generate
    assert "top_p" not in rec.generate


@pytest.mark.parametrize("precision, dtype", [("bf16", "bfloat16"), ("fp16", "float16"), ("fp32", "float32")])
def test_the_target_loads_in_the_runs_precision(execute, precision, dtype):
    rec = execute(hf_generate_code(make(DrafterKind.PROMPT_LOOKUP, target_precision=precision)))
    assert rec.loaded[TARGET] == dtype


def test_a_bf16_draft_loads_in_bf16_and_says_so(execute):
    code = hf_generate_code(make(precision="bf16"))
    assert execute(code).loaded[DRAFT] == "bfloat16"
    assert "# The run drafted in bf16." in code


def test_an_int8_draft_is_quantised_per_channel_on_the_cpu_and_says_so(execute):
    code = hf_generate_code(make(precision="int8", target_precision="bf16"))
    rec = execute(code)
    assert rec.loaded == {TARGET: "bfloat16", DRAFT: "float32"}  # int8 is quantised from an fp32 load
    assert rec.quantized == [("decoder", {"Linear": "per-channel"}, "qint8")]
    assert 'device = "cpu"' in code
    assert "# The run drafted in int8" in code


def test_an_int4_draft_says_transformers_has_none_and_drafts_in_bf16(execute):
    code = hf_generate_code(make(precision="int4", target_precision="bf16"))
    assert execute(code).loaded == {TARGET: "bfloat16", DRAFT: "bfloat16"}
    assert "# The run drafted in int4" in code and "equivalent" in code


def test_the_chat_template_is_applied_when_the_run_used_it(execute):
    assert execute(hf_generate_code(make(prompt="Hi there"))).asked == ["chat:Hi there"]
    assert execute(hf_generate_code(make(prompt="Hi there", chat=False))).asked == ["raw:Hi there"]


# ---------------------------------------------------------------- vLLM


def test_a_draft_model_run_exports_vllms_draft_model_config(execute):
    rec = execute(vllm_code(make(k=5, temperature=0.8, top_p=0.9, max_new_tokens=40)))
    assert rec.llm == {
        "model": TARGET,
        "speculative_config": {"method": "draft_model", "model": DRAFT, "num_speculative_tokens": 5},
    }
    assert rec.params == {"temperature": 0.8, "top_p": 0.9, "max_tokens": 40}
    assert rec.asked == ["chat:Hello"]


def test_a_prompt_lookup_run_exports_vllms_ngram_config(execute):
    rec = execute(vllm_code(make(DrafterKind.PROMPT_LOOKUP, k=7, max_ngram=4, draft=None)))
    assert rec.llm["speculative_config"] == {
        "method": "ngram",
        "num_speculative_tokens": 7,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 1,
    }


def test_vllm_gets_the_target_precision_and_top_k(execute):
    rec = execute(vllm_code(make(target_precision="bf16", temperature=1.0, top_k=20)))
    assert rec.llm["dtype"] == "bfloat16"
    assert rec.params["top_k"] == 20


def test_vllm_without_chat_generates_from_the_raw_prompt(execute):
    assert execute(vllm_code(make(prompt="def f(", chat=False))).asked == ["raw:def f("]


def test_the_target_alone_exports_vllm_without_speculation(execute):
    rec = execute(vllm_code(make(DrafterKind.TARGET_ALONE)))
    assert rec.llm == {"model": TARGET}


def test_the_vllm_engine_is_created_only_in_the_main_process(monkeypatch):
    """vLLM spawns worker processes that import the main module again: the snippet creates its engine under
    `if __name__ == "__main__":`, so a re-import creates none."""
    rec = Recorder()
    for name, module in fake_modules(rec).items():
        monkeypatch.setitem(sys.modules, name, module)
    exec(compile(vllm_code(make()), "<exported>", "exec"), {"__name__": "__mp_main__"})
    assert rec.llm == {} and rec.asked == []


def test_vllm_without_a_chat_template_generates_from_the_raw_prompt(execute, monkeypatch):
    monkeypatch.setattr(FakeTokenizer, "chat_template", None)  # a base model: the playground used the raw text
    assert execute(vllm_code(make(prompt="def f("))).asked == ["raw:def f("]


def test_early_exit_has_no_vllm_equivalent_and_says_so():
    code = vllm_code(make(DrafterKind.EARLY_EXIT, exit_layer=6))
    assert ast.parse(code).body == []  # comments only
    assert "vLLM has no early-exit" in code
    assert vllm_config(make(DrafterKind.EARLY_EXIT, exit_layer=6)) is None


# ---------------------------------------------------------------- vLLM's server, beyond one machine


def test_the_server_commands_carry_the_model_precision_and_speculative_config():
    code = vllm_serve_command(make(k=5, target_precision="bf16"), tensor_parallel=4, pipeline_parallel=2, port=8001)
    commands = [shlex.split(line) for line in code.splitlines() if line.startswith("vllm serve")]
    assert len(commands) == 3
    one, tensor, pipeline = commands
    assert one[:3] == ["vllm", "serve", TARGET]
    assert one[one.index("--dtype") + 1] == "bfloat16" and one[one.index("--port") + 1] == "8001"
    assert json.loads(one[one.index("--speculative-config") + 1]) == {
        "method": "draft_model",
        "model": DRAFT,
        "num_speculative_tokens": 5,
    }
    assert tensor == one + ["--tensor-parallel-size", "4"]
    assert pipeline == tensor + ["--pipeline-parallel-size", "2", "--distributed-executor-backend", "ray"]
    assert "Compare pairs tab at http://HOST:8001" in code


def test_the_server_commands_of_prompt_lookup_and_of_the_target_alone():
    ngram = shlex.split(
        vllm_serve_command(make(DrafterKind.PROMPT_LOOKUP, k=7, max_ngram=4, draft=None)).splitlines()[1]
    )
    assert json.loads(ngram[ngram.index("--speculative-config") + 1])["method"] == "ngram"
    plain = vllm_serve_command(make(DrafterKind.TARGET_ALONE))
    assert "--speculative-config" not in plain and "vllm serve" in plain
    assert all(
        line.startswith("#") for line in vllm_serve_command(make(DrafterKind.EARLY_EXIT, exit_layer=6)).splitlines()
    )


@pytest.mark.parametrize("where", ["target", "draft"])
def test_hostile_model_names_stay_one_shell_word(where):
    words = shlex.split(vllm_serve_command(make(**{where: HOSTILE})), comments=True)  # as a shell reads the lines
    assert words.count("serve") == 3 and ";" not in words and "rm" not in words
    written = f"path/to/your/{where}-model"  # not a Hub id: a local folder's placeholder (hub_id)
    if where == "target":
        assert words.count(written) == 3
    else:
        configs = [json.loads(words[i + 1]) for i, w in enumerate(words) if w == "--speculative-config"]
        assert [c["model"] for c in configs] == [written] * 3


# ---------------------------------------------------------------- user text stays text


@pytest.mark.parametrize("where", ["prompt", "target", "draft"])
@pytest.mark.parametrize("export", [hf_generate_code, vllm_code])
def test_hostile_text_stays_a_string_literal(where, export):
    code = export(make(temperature=0.8, **{where: HOSTILE}))
    tree = ast.parse(code)
    assert "os" not in imported(code)
    written = HOSTILE if where == "prompt" else f"path/to/your/{where}-model"  # a model: hub_id's placeholder
    assert written in [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    assert "os" not in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


@pytest.mark.parametrize("export", [hf_generate_code, vllm_code])
def test_a_hostile_prompt_is_exactly_the_prompt_constant(export):
    tree = ast.parse(export(make(DrafterKind.PROMPT_LOOKUP, prompt=HOSTILE)))
    assigns = {
        n.targets[0].id: n.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
    }
    assert isinstance(assigns["prompt"], ast.Constant)
    assert assigns["prompt"].value == HOSTILE


def test_a_hostile_prompt_reaches_the_model_unchanged(execute):
    assert execute(hf_generate_code(make(prompt=HOSTILE))).asked == ["chat:" + HOSTILE]


# ---------------------------------------------------------------- packs


def test_known_packs_map_to_their_hub_models():
    assert hub_id("pack:qwen2.5-coder-0.5b-instruct") == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    assert hub_id("pack:qwen2.5-coder-1.5b-instruct") == "Qwen/Qwen2.5-Coder-1.5B-Instruct"


@pytest.mark.parametrize("model", ["pack:something-else", "HuggingFaceTB/SmolLM2-135M-Instruct"])
def test_other_models_are_exported_as_given(model):
    assert hub_id(model) == model


def test_local_folders_are_exported_as_placeholders(execute, tmp_path, monkeypatch):
    """A local-folder pair's code names placeholders, never the server's folders (issue 55: it showed them), in the
    generate snippet, the vLLM code and its serve command; a folder given relative to the server's directory too."""
    target, draft = tmp_path / "srv" / "models" / "my-llama", "./models/my-draft"
    assert hub_id(str(target), "target") == "path/to/your/target-model" and hub_id("~/m", "draft").endswith(
        "draft-model"
    )
    spec = make(target=str(target), draft=draft)
    hf, vllm, serve = hf_generate_code(spec), vllm_code(spec), vllm_serve_command(spec)
    for code in (hf, vllm, serve):
        assert str(tmp_path) not in code and "my-llama" not in code and "my-draft" not in code, code
    assert set(execute(hf).loaded) == {"path/to/your/target-model", "path/to/your/draft-model"}
    assert execute(vllm).llm["model"] == "path/to/your/target-model"
    assert "vllm serve path/to/your/target-model" in serve
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)  # that name is shaped as a Hub id, but names a folder of the server's directory
    assert hub_id("models/tiny", "draft") == "path/to/your/draft-model"


def test_pack_runs_export_hub_ids(execute):
    spec = make(target="pack:qwen2.5-coder-1.5b-instruct", draft="pack:qwen2.5-coder-0.5b-instruct")
    hf, vllm = hf_generate_code(spec), vllm_code(spec)
    assert "pack:" not in hf
    assert "pack:" not in vllm
    assert set(execute(hf).loaded) == {"Qwen/Qwen2.5-Coder-1.5B-Instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct"}
    assert execute(vllm).llm == {
        "model": "Qwen/Qwen2.5-Coder-1.5B-Instruct",
        "speculative_config": {
            "method": "draft_model",
            "model": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
            "num_speculative_tokens": spec.decode.k,
        },
    }


# ---------------------------------------------------------------- draft-free strategies


def draftfree(kind: DrafterKind, **options) -> RunSpec:
    return RunSpec(
        PairSpec("pair", TARGET, DRAFT),
        DrafterSpec.of(kind, **options),
        DecodeConfig(k=6, policy=KPolicy.FIXED),
        "Hello",
    )


def test_a_suffix_run_exports_vllms_suffix_config_with_its_options(execute):
    spec = draftfree(DrafterKind.SUFFIX, suffix_factor=2.0, suffix_min_prob=0.05, suffix_depth=32)
    assert execute(vllm_code(spec)).llm["speculative_config"] == {
        "method": "suffix",
        "num_speculative_tokens": 6,
        "suffix_decoding_max_tree_depth": 32,
        "suffix_decoding_max_spec_factor": 2.0,
        "suffix_decoding_min_token_prob": 0.05,
        "suffix_decoding_max_cached_requests": 0,
    }  # runs stand alone: no cache of earlier requests
    remembering = draftfree(DrafterKind.SUFFIX, suffix_memory=True)
    assert vllm_config(remembering)["suffix_decoding_max_cached_requests"] > 0


def test_a_suffix_run_exports_prompt_lookup_to_transformers_and_says_why(execute):
    code = hf_generate_code(draftfree(DrafterKind.SUFFIX))
    assert "transformers has no suffix decoding" in code
    assert execute(code).generate["prompt_lookup_num_tokens"] == 6


def test_suffixs_nearest_prompt_lookup_reads_prompt_lookups_own_default(execute, monkeypatch):
    """Its n-gram size is prompt lookup's Options' default, not a copy of it (issue 56)."""
    monkeypatch.setattr(prompt_lookup, "Options", lambda: types.SimpleNamespace(max_ngram=5))
    assert execute(hf_generate_code(draftfree(DrafterKind.SUFFIX))).generate["max_matching_ngram_size"] == 5


def test_a_lookahead_run_exports_the_reference_implementation_with_w_n_g(execute, monkeypatch):
    calls = {}
    lade = types.ModuleType("lade")
    lade.augment_all = lambda: calls.setdefault("augmented", True)
    lade.config_lade = lambda **kw: calls.update(kw)
    monkeypatch.setitem(sys.modules, "lade", lade)
    spec = draftfree(
        DrafterKind.LOOKAHEAD, lookahead_window=7, lookahead_ngram=4, lookahead_guesses=6, lookahead_prompt_pool=True
    )
    code = hf_generate_code(spec)
    execute(code)
    assert calls == {
        "augmented": True,
        "LEVEL": 4,
        "WINDOW_SIZE": 7,
        "GUESS_SET_SIZE": 6,
        "DEBUG": 0,
        "POOL_FROM_PROMPT": True,
    }
    assert imported(code) <= ALLOWED_IMPORTS | {"lade", "os"} and "hao-ai-lab/LookaheadDecoding" in code
    vllm = vllm_code(spec)
    assert ast.parse(vllm).body == [] and "vLLM has no lookahead decoding" in vllm


# ---------------------------------------------------------------- the registry's transformers peer, written out

PLAIN = {"max_new_tokens", "do_sample", "temperature", "top_p", "top_k", "repetition_penalty"}  # every run's


@pytest.mark.parametrize("kind", list(decoding.REGISTRY))
def test_the_hf_snippet_runs_what_the_registry_builds_for_each_strategy(execute, monkeypatch, kind):
    """Each strategy's transformers peer (decoding.hf_generate, which the bench's HF peer runs too) is what its
    exported snippet does: the same generate() arguments (a model or tokenizer: the one the snippet loaded), k and
    the schedule on the drafting model's generation_config and on no other, its setup code."""
    monkeypatch.setitem(sys.modules, "lade", types.SimpleNamespace(augment_all=lambda: None, config_lade=dict))
    options = options_of(kind, dict(exit_layer=5, max_ngram=2, lookahead_window=4, suffix_depth=9))
    spec = RunSpec(PairSpec("pair", TARGET, DRAFT), DrafterSpec(kind, options), DecodeConfig(k=6), "Hello")
    built = decoding.hf_generate(kind, options, 6)
    code = hf_generate_code(spec)
    rec = execute(code)
    objects = {
        decoding.HFObject.DRAFT: rec.models.get(DRAFT),
        decoding.HFObject.TARGET: rec.models[TARGET],
        decoding.HFObject.TOKENIZER: rec.tokenizers[TARGET],
        decoding.HFObject.DRAFT_TOKENIZER: rec.tokenizers.get(DRAFT),
    }
    sent = {name: value for name, value in rec.generate.items() if name not in PLAIN}
    assert sent == {n: objects[v] if isinstance(v, decoding.HFObject) else v for n, v in built.arguments.items()}
    assert rec.generating is rec.models[TARGET]
    for model_id, model in rec.models.items():
        drafting = built.drafts is not None and model is objects[built.drafts]
        assert getattr(model.generation_config, "num_assistant_tokens", None) == (6 if drafting else None), model_id
    assert set(rec.models) == ({TARGET, DRAFT} if built.drafts is decoding.HFObject.DRAFT else {TARGET})
    assert all(line in code.splitlines() for line in built.setup)
