"""vLLM as a peer and as an engine (playground/vllm/engine.py, server.py, worker.py).

On a tiny random pair that vLLM's CPU build loads (playground/vllm/tiny.py), fp32 on both sides:
vLLM's greedy output for the target alone, for draft-model and for ngram speculation equals our
engine's target alone, token for token; its spec-decode counters parse and add up; an OpenAI-compatible
server started here on localhost gives the same tokens and counters through its completions and
/metrics. Each bad input has its message. One vLLM engine per method for the whole module (each start
costs tens of seconds on 2 cores).

The tests that run vLLM skip, saying why, when its environment is missing (bash scripts/install.sh --vllm),
unless PLAYGROUND_REQUIRE_VLLM is set (scripts/test.sh sets it): then they fail. The error-path tests with a
stand-in environment run everywhere. The server is the session's (tests/conftest.py: vllm_server).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.helpers import run_all, load_pair
from playground import trace
from playground.vllm import serve as vllm_serve, server as vllm_server
from playground.trace.counters import SpecCounters
from playground.vllm.metrics import parse_prometheus
from playground.vllm.engine import Stopped, VLLMRequest, run_worker, vllm_python
from playground.core.errors import PlaygroundError
from playground.run.runner import encode_prompt, new_tokens
from playground.core.config import DecodeConfig, DrafterKind, KPolicy
from playground.run.spec import DrafterSpec, PairSpec, RunSpec
from tests.vllm_support import K, MAX_TOKENS, fast_request as request, not_vllm_server, require_vllm

TEXTS = {"story": "Once upon a time", "code": "def fibonacci(n):", "fox": "The quick brown fox"}


@pytest.fixture(scope="module")
def ours(vllm_pair, runner) -> dict[str, tuple[list[int], list[int]]]:
    """Our engine's target alone, greedy, fp32: prompt id -> (prompt ids, output ids)."""
    pair = PairSpec("tiny vllm (test)", str(vllm_pair["target"]), str(vllm_pair["draft"]), target_precision="fp32")
    out = {}
    for name, text in TEXTS.items():
        spec = RunSpec(
            pair,
            DrafterSpec(DrafterKind.DRAFT_MODEL),
            DecodeConfig(max_new_tokens=MAX_TOKENS, k=K, policy=KPolicy.FIXED),
            text,
        ).baseline()
        loaded = load_pair(runner, spec)
        out[name] = (encode_prompt(loaded.tokenizer, text)[0].tolist(), new_tokens(run_all(runner, spec)))
    return out


@pytest.fixture(scope="module")
def worker_runs(vllm_pair, ours):
    """method -> the worker's run of every prompt (as our token ids), greedy and T = 0.7; one engine each."""
    require_vllm()
    cache = {}

    def get(method: str):
        if method not in cache:
            prompts = {name: ids for name, (ids, _) in ours.items()}
            if method == "target":  # and as text, encoded on vLLM's side
                prompts.update({f"{name} (text)": text for name, text in TEXTS.items()})
            cache[method] = run_worker(
                request(vllm_pair, method, temperatures=(0.0, 0.7), in_process=True), prompts, timeout_s=600
            )
        return cache[method]

    return get


def check_counters(run, method: str) -> None:
    for r in run.results:
        c = r.counters
        assert c.num_accepted_tokens <= c.num_draft_tokens <= K * c.num_drafts
        if c.num_drafts:
            assert len(c.num_accepted_tokens_per_pos) == K
            assert sum(c.num_accepted_tokens_per_pos) == c.num_accepted_tokens
            assert list(c.num_accepted_tokens_per_pos) == sorted(c.num_accepted_tokens_per_pos, reverse=True)
            # each draft round yields its accepted tokens plus the target's own; the prompt pass yields one
            assert c.num_drafts + c.num_accepted_tokens <= len(r.token_ids) - 1 + K
    assert run.totals == sum((r.counters for r in run.results), SpecCounters())
    if method == "target":
        assert run.totals == SpecCounters()
    if method == "draft_model":  # the draft is the target with a noisy head: it drafts every round, often right
        greedy = run.counters(temperature=0.0)
        assert greedy.num_drafts > 0 and greedy.num_draft_tokens == K * greedy.num_drafts
        assert greedy.num_accepted_tokens > 0


@pytest.mark.parametrize("method", ["target", "draft_model", "ngram"])
def test_vllm_greedy_output_equals_our_target_alone(worker_runs, ours, method):
    run = worker_runs(method)
    for name, (ids, expected) in ours.items():
        result = run.result(name, 0.0)
        assert result.prompt_token_ids == ids
        assert result.token_ids == expected, (method, name)
        assert result.wall_s > 0 and result.tokens_per_s > 0
    check_counters(run, method)
    assert {r.temperature for r in run.results} == {0.0, 0.7}
    assert all(r.token_ids for r in run.results if r.temperature == 0.7)
    assert run.vllm_version and run.load_s > 0 and run.engine["dtype"] == "float32"


def test_the_worker_applies_the_prompt_as_our_runner_does(worker_runs, ours):
    """A text prompt encoded on vLLM's side (its transformers, the target's tokenizer) gives our ids and output."""
    run = worker_runs("target")
    for name, (ids, expected) in ours.items():
        assert run.result(f"{name} (text)").prompt_token_ids == ids
        assert run.result(f"{name} (text)").token_ids == expected


def test_counters_are_named_as_our_trace_names_them():
    counters = SpecCounters(4, 12, 5, (3, 1, 1))
    names = set(trace.vllm_metrics([]))
    assert set(counters.as_dict()) <= names
    assert counters.mean_acceptance_length == pytest.approx(1 + 5 / 4)
    assert counters.draft_acceptance_rate == pytest.approx(5 / 12)
    assert counters.acceptance_by_position == [0.75, 0.25, 0.25]
    assert counters - SpecCounters(1, 3, 1, (1,)) == SpecCounters(3, 9, 4, (2, 1, 1))


PROMETHEUS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 16.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="tiny"} 4.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 48.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="tiny"} 12.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 9.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="tiny"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="2"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="tiny",position="1"} 1.7e9
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="tiny",position="0"} 2.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="other"} 100.0
"""


def test_prometheus_counters_parse_summed_over_engines_for_the_model():
    assert parse_prometheus(PROMETHEUS, "tiny") == SpecCounters(20, 60, 11, (6, 3, 2))
    assert parse_prometheus(PROMETHEUS).num_drafts == 120
    assert parse_prometheus("vllm:num_requests_running 0.0\n") == SpecCounters()


# ------------------------------------------------------------------------------- a server on localhost


@pytest.fixture
def server(vllm_server):
    return vllm_server


def test_the_server_client_reads_tokens_and_counters(server, ours, worker_runs):
    info = server.check()
    assert info.model == "tiny" and info.models == ["tiny"] and info.speculative and info.version
    run = server.run({name: ids for name, (ids, _) in ours.items()}, max_tokens=MAX_TOKENS)
    worker = worker_runs("draft_model")
    for name, (ids, expected) in ours.items():
        result = run.result(name)
        assert result.token_ids == expected, name
        assert result.prompt_token_ids == ids
        # one request at a time: the /metrics difference is that request's, as the worker counts it
        assert result.counters == worker.result(name, 0.0).counters, name
    check_counters(run, "draft_model")


def test_a_server_serving_another_model_is_named(server, allow_vllm):
    with pytest.raises(PlaygroundError, match=r"serves \['tiny'\], not 'qwen'"):
        vllm_server.VLLMServer(server.base, "qwen").check()


def test_an_unreachable_url_says_so(monkeypatch):
    url = f"http://127.0.0.1:{vllm_serve.free_port()}"  # nothing listens there
    monkeypatch.setenv("PLAYGROUND_VLLM_URLS", url)  # loopback: reached only when allow-listed
    with pytest.raises(PlaygroundError, match="Cannot reach a vLLM server at .* Is it running"):
        vllm_server.VLLMServer(url, connect_timeout_s=2).check()
    with pytest.raises(PlaygroundError, match="give it as http://host:port"):
        vllm_server.VLLMServer("localhost 8000")


@pytest.mark.parametrize("openai", [False, True], ids=["plain http", "openai-compatible"])
def test_a_server_that_is_not_vllm_says_so(openai, monkeypatch):
    with not_vllm_server(openai) as url:
        monkeypatch.setenv("PLAYGROUND_VLLM_URLS", url)
        match = "OpenAI-compatible but not vLLM" if openai else "is not a vLLM server: GET /v1/models answered HTTP 404"
        with pytest.raises(PlaygroundError, match=match):
            vllm_server.VLLMServer(url, connect_timeout_s=5).check()


# ------------------------------------------------------------------------------- the worker's bad inputs


def test_a_missing_environment_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_VLLM_VENV", str(tmp_path / "nowhere"))
    with pytest.raises(PlaygroundError, match="vLLM is not installed.*bash scripts/install_vllm.sh"):
        vllm_python()
    with pytest.raises(PlaygroundError, match="vLLM is not installed"):
        run_worker(VLLMRequest(target=str(tmp_path)), {"a": [1]})


def fake_venv(root: Path, script: str) -> Path:
    """A stand-in vLLM environment whose python runs `script` (bash; $4 is the result path)."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "vllm").write_text("")
    python = root / "bin" / "python"
    python.write_text("#!/bin/bash\n" + script)
    python.chmod(0o755)
    return root


def alive(pid: int, wait_s: float = 5.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state == "Z":  # ended, waiting for its parent to collect it
            return False
        time.sleep(0.1)
    return True


def test_a_worker_crash_timeout_and_stop_each_say_so(tmp_path, tiny_models):
    target = str(tiny_models["target"])
    crash = fake_venv(tmp_path / "crash", "echo 'Segmentation fault' >&2; exit 3\n")
    with pytest.raises(PlaygroundError, match=r"exited with code 3 without a result \(a crash\)(.|\n)*Segmentation"):
        run_worker(VLLMRequest(target=target), {"a": [1]}, venv=crash)
    result = json.dumps({"ok": False, "error": "crash", "message": "EngineDeadError"})
    failed = fake_venv(tmp_path / "failed", f"echo '{result}' > \"$4\"\n")
    with pytest.raises(PlaygroundError, match="vLLM failed: EngineDeadError"):
        run_worker(VLLMRequest(target=target), {"a": [1]}, venv=failed)
    child = tmp_path / "child.pid"
    hang = fake_venv(tmp_path / "hang", f"sleep 300 & echo $! > {child}\nsleep 300\n")
    with pytest.raises(PlaygroundError, match="did not finish in 1 s and was stopped"):
        run_worker(VLLMRequest(target=target), {"a": [1]}, timeout_s=1, venv=hang)
    assert not alive(int(child.read_text()))  # the worker's whole process group was ended, children too
    with pytest.raises(Stopped):
        run_worker(VLLMRequest(target=target), {"a": [1]}, should_stop=lambda: True, venv=hang)
    left = tmp_path / "left.pid"  # a worker that exits leaving an engine process behind: it is ended too
    result = json.dumps({"ok": False, "error": "model_mismatch", "message": "another tokenizer"})
    leaves = fake_venv(tmp_path / "leaves", f"sleep 300 & echo $! > {left}\necho '{result}' > \"$4\"\n")
    with pytest.raises(PlaygroundError, match="vLLM: another tokenizer"):
        run_worker(VLLMRequest(target=target), {"a": [1]}, venv=leaves)
    assert not alive(int(left.read_text()))


def test_model_mismatches_are_named(tiny_models, vllm_pair, tmp_path):
    require_vllm()
    with pytest.raises(PlaygroundError, match="target folder .* has no config.json"):
        run_worker(VLLMRequest(target=str(tmp_path)), {"a": [1]})
    other = VLLMRequest(target=str(vllm_pair["target"]), draft=str(tiny_models["other"]), method="draft_model")
    with pytest.raises(PlaygroundError, match=r"draft's vocabulary \(280 tokens\) is not the target's \(320\)"):
        run_worker(other, {"a": [1]}, timeout_s=300)
    with pytest.raises(PlaygroundError, match="outside the target's vocabulary of 320"):
        run_worker(VLLMRequest(target=str(vllm_pair["target"])), {"a": [1, 50_000]}, timeout_s=300)
