"""Shared fixtures: tiny random models built and saved once per test session, loaded
back through the real loading code (playground.models)."""

from __future__ import annotations

import copy
import os
from types import SimpleNamespace

# Tests never use the Hub: fail fast instead of retrying a network that is not there.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Tiny random models decide many near-ties; the tests pin fp32 so that "lossless" means token-identical
# (the bf16 path has tests of its own that ask for it by name).
os.environ.setdefault("PLAYGROUND_DTYPE", "fp32")

import pytest
import torch

from playground import models
from playground.models import tiny
from playground.run.runner import Runner
from playground.core.config import DecodeConfig, DrafterKind
from tests.helpers import FIXED_64
from playground.run.spec import DrafterSpec, PairSpec, RunSpec

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """{"target", "draft", "twin", "other"} -> folder; the folders are allowed model roots."""
    root = tmp_path_factory.mktemp("tiny-models")
    folders = tiny.build_pair(root)
    old = os.environ.get("PLAYGROUND_MODEL_ROOTS")
    os.environ["PLAYGROUND_MODEL_ROOTS"] = str(root)
    yield folders
    if old is None:
        os.environ.pop("PLAYGROUND_MODEL_ROOTS", None)
    else:
        os.environ["PLAYGROUND_MODEL_ROOTS"] = old


@pytest.fixture(scope="session")
def tiny_pair(tiny_models) -> models.LoadedPair:
    """fp32 draft and target: exact cache checks need it (int8 quantises activations per call);
    the int8 and bf16 drafts have tests of their own."""
    return models.load_pair(
        str(tiny_models["draft"]), str(tiny_models["target"]), target_precision="fp32", draft_precision="fp32"
    )


@pytest.fixture(scope="session")
def loop_pair(tiny_pair):
    """The tiny target with its attention outputs zeroed: each position sees only its own token, a bigram model
    whose greedy text soon runs into a cycle (text that repeats, as the random target's does not)."""
    target = copy.deepcopy(tiny_pair.target)
    with torch.no_grad():
        for layer in target.model.layers:
            layer.self_attn.o_proj.weight.zero_()
    return SimpleNamespace(target=target, draft=None, tokenizer=tiny_pair.tokenizer, eos=set())


@pytest.fixture(scope="session")
def runner() -> Runner:
    """One runner for the test session (its warm-ups and cost profiles are kept per model)."""
    return Runner()


@pytest.fixture(scope="session")
def tiny_spec(tiny_models):
    """make(prompt="Once upon a time", drafter="draft model", **decode) -> a RunSpec on the tiny pair (64 tokens, a
    fixed k unless told: tests.helpers.FIXED_64)."""
    pair = PairSpec("tiny (test)", str(tiny_models["target"]), str(tiny_models["draft"]))

    def make(
        prompt: str = "Once upon a time", drafter: DrafterKind | str | DrafterSpec = DrafterKind.DRAFT_MODEL, **decode
    ) -> RunSpec:
        d = drafter if isinstance(drafter, DrafterSpec) else DrafterSpec(DrafterKind(drafter))
        return RunSpec(pair, d, DecodeConfig(**(FIXED_64 | decode)), prompt)

    return make


@pytest.fixture(scope="session")
def twin_pair(tiny_models) -> models.LoadedPair:
    # fp32 on both sides: the twin is the target's exact copy (an int8 twin would not be)
    return models.load_pair(
        str(tiny_models["twin"]), str(tiny_models["target"]), target_precision="fp32", draft_precision="fp32"
    )


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def app_server(app_process) -> str:
    """The URL of `python app.py` running on the tiny pairs."""
    return app_process[0]


@pytest.fixture(scope="session")
def app_models(app_process):
    """The folder of that app's tiny models (target, draft, twin, other)."""
    return app_process[1]


DOWN_URL = "http://127.0.0.1:9"  # an allowed vLLM URL where nothing listens (the discard port)


@pytest.fixture(scope="session")
def vllm_port() -> int:
    """The port of the session's vLLM server, chosen before it starts: the app's allow-list names it."""
    return free_port()


@pytest.fixture(scope="session")
def vllm_urls(vllm_port) -> str:
    """PLAYGROUND_VLLM_URLS for the tests that reach the session's vLLM server by URL (and the allowed URL where
    nothing listens): the allow-list is empty by default, and loopback is refused unless listed."""
    return f"http://127.0.0.1:{vllm_port},{DOWN_URL}"


@pytest.fixture
def allow_vllm(vllm_urls, monkeypatch) -> str:
    """This test may reach the session's vLLM server by URL (PLAYGROUND_VLLM_URLS)."""
    monkeypatch.setenv("PLAYGROUND_VLLM_URLS", vllm_urls)
    return vllm_urls


@pytest.fixture(scope="session")
def app_process(tmp_path_factory, vllm_pair, vllm_urls):
    """`python app.py` on the tiny pairs, on a free localhost port: (url, model folder). Its catalog also has
    "tiny vllm (test)", the vLLM-loadable tiny pair that the session's vLLM server serves (the same folders), and its
    allow-list names that server (PLAYGROUND_VLLM_URLS)."""
    import json
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    root_dir = Path(__file__).resolve().parents[1]
    root = tmp_path_factory.mktemp("app-models")
    pairs = tiny.write_pairs_file(root)
    pairs.write_text(
        json.dumps(
            json.loads(pairs.read_text())
            + [{"name": VLLM_PAIR, "draft": str(vllm_pair["draft"]), "target": str(vllm_pair["target"])}],
            indent=1,
        )
    )
    port = free_port()
    roots = os.pathsep.join([str(root), str(vllm_pair["target"].parent)])
    env = dict(
        os.environ,
        PLAYGROUND_PAIRS_FILE=str(pairs),
        PLAYGROUND_MODEL_ROOTS=roots,
        PLAYGROUND_DEFAULT_PAIR="tiny (test)",
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        HF_HUB_OFFLINE="1",
        GRADIO_ANALYTICS_ENABLED="False",
        OMP_NUM_THREADS="1",
        PLAYGROUND_VLLM_URLS=vllm_urls,
    )
    log = open(root / "app.log", "w")
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=root_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
    (root / "app.pid").write_text(str(proc.pid))  # for the memory load test
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"app.py exited with {proc.returncode}:\n{(root / 'app.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("app.py did not start in 120 s:\n" + (root / "app.log").read_text()[-3000:])
            time.sleep(0.5)
        yield url, root
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="session")
def cross_models(tiny_models) -> dict[str, str]:
    """Tiny pairs of two tokenizers, in the tiny models' root (an allowed model root):
    "draft" -> "target": trained on the corpus, a Metaspace BPE draft for a byte-level BPE target;
    "other" -> "random": tiny.build_pair's unrelated random draft (its own BPE) for the random target."""
    folders = tiny.build_cross_pair(tiny_models["target"].parent)
    return {
        "draft": str(folders["draft"]),
        "target": str(folders["target"]),
        "other": str(tiny_models["other"]),
        "random": str(tiny_models["target"]),
        "same": str(tiny_models["draft"]),
    }


TINY_PAIR, TWIN_PAIR, VLLM_PAIR = "tiny (test)", "tiny twin (test)", "tiny vllm (test)"


@pytest.fixture
def tiny_catalog(tiny_models, tmp_path, monkeypatch):
    """The catalog with the tiny pairs added (PLAYGROUND_PAIRS_FILE), the tiny pair as the default."""
    import json

    path = tmp_path / "pairs.json"
    path.write_text(
        json.dumps(
            [
                {"name": TINY_PAIR, "draft": str(tiny_models["draft"]), "target": str(tiny_models["target"])},
                {"name": TWIN_PAIR, "draft": str(tiny_models["twin"]), "target": str(tiny_models["target"])},
            ]
        )
    )
    monkeypatch.setenv("PLAYGROUND_PAIRS_FILE", str(path))
    monkeypatch.setenv("PLAYGROUND_DEFAULT_PAIR", TINY_PAIR)
    return path


@pytest.fixture(scope="session")
def vllm_pair(tiny_models) -> dict:
    """The vLLM-loadable tiny pair (playground.vllm.tiny: head_dim 32), inside the tiny models' root."""
    from playground.vllm import tiny as tiny_vllm

    return tiny_vllm.build_pair(tiny_models["target"].parent)


@pytest.fixture(scope="session")
def vllm_server(vllm_pair, vllm_port):
    """vLLM's OpenAI-compatible server on the tiny vLLM pair with draft-model speculation (k = 3), served as
    "tiny" on localhost (vllm_port): one for the whole session (the bench, UI and load tests share it). A test that
    reaches it by URL allow-lists it (allow_vllm; app_process does)."""
    from playground.vllm import serve as server_module
    from tests.vllm_support import fast_request, require_vllm

    require_vllm()
    with server_module.start_server(
        fast_request(vllm_pair, "draft_model"), port=vllm_port, served_name="tiny", timeout_s=300
    ) as s:
        yield s
