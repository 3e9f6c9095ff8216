"""Shared fixtures: tiny random models built and saved once per test session, loaded
back through the real loading code (playground.models)."""
from __future__ import annotations

import os

# Tests never use the Hub: fail fast instead of retrying a network that is not there.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from playground import models, tiny

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
    return models.load_pair(str(tiny_models["draft"]), str(tiny_models["target"]))


@pytest.fixture(scope="session")
def twin_pair(tiny_models) -> models.LoadedPair:
    return models.load_pair(str(tiny_models["twin"]), str(tiny_models["target"]))
