"""The Export tab's vLLM snippets run (playground/views/export_code.py: vllm_code).

Each snippet, as the Export tab writes it for a run on the tiny vLLM pair (playground/vllm/tiny.py, fp32,
greedy), is saved as a script and run as is with the python of vLLM's own environment, in vLLM's default
process layout (so the `if __name__ == "__main__":` guard is exercised: vLLM's workers import the script
again). What it prints is our engine's greedy output for the same run, decoded: the draft-model snippet and
the ngram (prompt lookup) snippet alike.

One vLLM engine per snippet (two for the module). Without vLLM's environment these tests skip, saying why, or
fail under PLAYGROUND_REQUIRE_VLLM=1 (scripts/test.sh sets it).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers import run_all, load_pair
from playground.vllm.engine import stop_group, vllm_env, vllm_python
from playground.run.runner import new_tokens
from playground.core.config import DecodeConfig, DrafterKind, Precision, KPolicy
from playground.run.spec import DrafterSpec, PairSpec, RunSpec
from playground.views.export_code import vllm_code, vllm_config
from tests.vllm_support import K, MAX_TOKENS, require_vllm

PROMPT = "Once upon a time"
TIMEOUT_S = 600  # an engine start with torch.compile: a minute or two on 2 busy cores
# vLLM logs to stdout by default: its lines go to stderr here, so that stdout is what the snippet prints
ENV = {"PYTHONIOENCODING": "utf-8", "VLLM_LOGGING_STREAM": "ext://sys.stderr"}


def exported_run(vllm_pair, kind: DrafterKind) -> RunSpec:
    pair = PairSpec(
        "tiny vllm (test)", str(vllm_pair["target"]), str(vllm_pair["draft"]), target_precision=Precision.FP32
    )
    drafter = DrafterSpec.of(kind, precision=Precision.FP32) if kind is DrafterKind.DRAFT_MODEL else DrafterSpec(kind)
    return RunSpec(
        pair, drafter, DecodeConfig(max_new_tokens=MAX_TOKENS, k=K, policy=KPolicy.FIXED, temperature=0.0), PROMPT
    )


@pytest.mark.parametrize("kind", [DrafterKind.DRAFT_MODEL, DrafterKind.PROMPT_LOOKUP], ids=["draft model", "ngram"])
def test_the_exported_vllm_snippet_prints_our_greedy_output(vllm_pair, runner, tmp_path, kind):
    require_vllm()
    spec = exported_run(vllm_pair, kind)
    ours = run_all(runner, spec)
    tokens = new_tokens(ours)
    assert tokens == new_tokens(run_all(runner, spec.baseline()))  # ours is the target's own greedy output
    expected = load_pair(runner, spec).tokenizer.decode(tokens, skip_special_tokens=True)

    code = vllm_code(spec)
    assert "speculative_config=" in code and vllm_config(spec)["num_speculative_tokens"] == K
    # local folders export as placeholders (the server's folders are not the reader's): the reader puts theirs in
    code = code.replace("path/to/your/target-model", spec.pair.target).replace(
        "path/to/your/draft-model", spec.pair.draft
    )
    script = tmp_path / "exported.py"
    script.write_text(code)
    # the script as a user runs it: vLLM's python, its own folder as the working directory (loopback only, offline)
    proc = subprocess.Popen(
        [str(vllm_python()), str(script)],
        cwd=tmp_path,
        env=vllm_env(ENV),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        stop_group(proc)  # a timeout, or engine processes left behind: the script's whole process group ends
    (tmp_path / "vllm.log").write_text(err)
    assert proc.returncode == 0, err[-3000:]
    # vLLM's detokenizer holds back an incomplete UTF-8 sequence at the end of a text (a tiny random model's
    # tokens are often single bytes); decoded here, it is U+FFFD: everything before it must be equal
    assert tokens and out == expected.rstrip("\ufffd") + "\n", (out[-2000:], expected)
