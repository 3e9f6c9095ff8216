"""The start-up in the background: the default pair prepared, loaded, warmed up and profiled while the page already
answers; its progress readable at any time; a failure kept as a message that says why; a run of that pair waits for
it, saying what it waits for."""

from __future__ import annotations

import json
import threading
import time

from playground import models
from playground.run.runner import Runner
from playground.run.startup import Startup
from tests.helpers import profile, warmed


def finished(startup: Startup, limit_s: float = 300) -> str:
    deadline = time.monotonic() + limit_s
    while startup.snapshot().busy and time.monotonic() < deadline:
        time.sleep(0.05)
    return startup.snapshot().phase


def test_the_default_pair_is_ready_and_warm_after_the_start_up(tiny_catalog):
    runner = Runner()
    startup = Startup(runner)
    assert startup.snapshot().phase == "off" and list(startup.wait(startup.spec())) == []
    startup.begin()
    seen = {startup.snapshot().phase}
    while startup.snapshot().busy:
        seen.add(startup.snapshot().phase)
        time.sleep(0.01)
    assert finished(startup) == "ready", startup.snapshot().message
    assert "Ready" in startup.snapshot().message and "after start-up" in startup.snapshot().message
    spec = startup.spec()
    drafted = models.default_draft_precision().value  # int4 where the kernels run (the tiny draft's shapes take it)
    assert f"; draft {drafted};" in startup.snapshot().message
    assert warmed(runner, spec) and profile(runner, spec) is not None  # the first Generate pays nothing
    assert seen & {"preparing", "loading"}


def test_a_failure_says_why_and_keeps_serving(tiny_catalog, tiny_models, tmp_path, monkeypatch):
    broken = tiny_models["target"].parent / "broken-startup"
    broken.mkdir(exist_ok=True)
    (broken / "config.json").write_text("{not json")
    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps([{"name": "broken", "draft": str(tiny_models["draft"]), "target": str(broken)}]))
    monkeypatch.setenv("PLAYGROUND_PAIRS_FILE", str(pairs))
    startup = Startup(Runner(), "broken")
    startup.begin()
    assert finished(startup) == "failed"
    message = startup.snapshot().message
    assert message.startswith("The default pair could not be prepared:") and "The rest of the app works" in message
    assert str(broken) not in message  # no server path


def test_a_run_of_the_pair_waits_saying_what_for(tiny_catalog):
    startup = Startup(Runner())
    gate = threading.Event()

    def slow_work():
        startup._set("preparing", "Converting the draft: 3 s, about 40 s left", 0.4)
        gate.wait(10)
        startup._set("ready", "Ready", 1.0)
        startup._done.set()

    startup._work = slow_work
    startup.begin()
    waiting = startup.wait(startup.spec())
    assert next(waiting) == "Converting the draft: 3 s, about 40 s left"
    gate.set()
    assert list(waiting) == []  # done: the run goes on
