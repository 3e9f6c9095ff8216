"""Many clients at once through the real Gradio queue (gradio_client against python app.py on the
tiny pairs): no failures, no cross-talk, bad input answered clearly while a normal run goes on.

Run with -s to see the measured latencies (they also go to $PLAYGROUND_LOAD_REPORT when set).
"""
from __future__ import annotations

import json
import os
import statistics
import threading
import time

import pytest
from gradio_client import Client

PAIR = "tiny (test)"
CLIENTS, REQUESTS = 8, 3


def args(prompt="Once upon a time", k=4, policy="fixed k", temperature=0.0, top_p=1.0, max_new=24, seed=0,
         draft_id="", target_id="", drafter="draft model", pair=PAIR, compare=False, exit_layer=0,
         target_precision="default", draft_precision="default"):
    """/generate's inputs, in order: the shared controls (playground.ui.common.Controls), then the comparison box."""
    return [pair, draft_id, target_id, target_precision, drafter, draft_precision, exit_layer, k, policy, temperature,
            top_p, max_new, seed, prompt, compare]


RUNNING = ("PROCESSING", "ITERATING")  # gradio_client reports a streaming job as ITERATING once it yields


def call(client: Client, a: list) -> tuple[str, str]:
    """(status html, tokens html) of a finished generation."""
    out = client.predict(*a, api_name="/generate")
    return out[0], out[1]


SETTINGS = [
    dict(prompt="Once upon a time", k=4, seed=0),
    dict(prompt="def fibonacci(n):", k=2, temperature=1.0, seed=7),
    dict(prompt="The quick brown fox", k=6, temperature=0.7, top_p=0.9, seed=3, policy="adaptive (heuristic)"),
    dict(prompt="Question: what is the capital of France? Answer:", k=3, drafter="prompt lookup"),
    dict(prompt="for i in range(10):", k=5, temperature=1.3, seed=11, policy="adaptive (theory)"),
    dict(prompt="import numpy as np", k=1, seed=2),
]


@pytest.fixture(scope="module")
def client(app_server):
    return Client(app_server, verbose=False)


def test_concurrent_clients_get_their_own_outputs(app_server, client):
    solo = {}
    for i, s in enumerate(SETTINGS):
        status, tokens = call(client, args(**s))
        assert "Done" in status, status
        solo[i] = tokens
    results, errors = [], []

    def worker(c: int) -> None:
        me = Client(app_server, verbose=False)
        for r in range(REQUESTS):
            which = (c + r) % len(SETTINGS)
            start = time.monotonic()
            job = me.submit(*args(**SETTINGS[which]), api_name="/generate")
            started = None
            while not job.done():
                if started is None and job.status().code.name in RUNNING:
                    started = time.monotonic()
                time.sleep(0.02)
            try:
                status, tokens = job.result()[:2]
            except Exception as exc:  # recorded, asserted below
                errors.append(repr(exc))
                continue
            end = time.monotonic()
            results.append(dict(client=c, which=which, latency=end - start,
                                wait=(started or end) - start, ok="Done" in status, same=tokens == solo[which]))

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert len(results) == CLIENTS * REQUESTS
    assert all(r["ok"] for r in results)
    assert all(r["same"] for r in results), [r for r in results if not r["same"]]
    latencies = sorted(r["latency"] for r in results)
    figures = dict(clients=CLIENTS, requests=len(results), success=sum(r["ok"] for r in results) / len(results),
                   p50_s=statistics.median(latencies), p95_s=latencies[int(0.95 * (len(latencies) - 1))],
                   max_wait_s=max(r["wait"] for r in results))
    print("\nload:", json.dumps(figures))
    if os.environ.get("PLAYGROUND_LOAD_REPORT"):
        with open(os.environ["PLAYGROUND_LOAD_REPORT"], "w") as f:
            json.dump(figures, f, indent=1)


# (input, the words its message must hold; a tuple: any of them; Gradio's own choice check is clear too)
BAD = [
    (dict(prompt=""), "prompt is empty"),
    (dict(prompt="   \n\t "), "prompt is empty"),
    (dict(prompt="x" * 100_000), "too long"),
    # (a lone-surrogate prompt cannot travel through gradio_client, which encodes JSON as UTF-8 itself:
    # tests/ui/test_run_tab.py checks the callback's message)
    (dict(prompt="the quick brown fox " * 100, max_new=200), "context window"),
    (dict(k=0), "k (draft length)"),
    (dict(k=17), "k (draft length)"),
    (dict(k=2.5), "k (draft length)"),
    (dict(temperature=-1), "temperature"),
    (dict(temperature="NaN"), "temperature"),  # JSON has no NaN: the API can only carry it as text
    (dict(top_p=0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(seed=-1), "seed"),
    (dict(seed=2**70), "seed"),
    (dict(max_new=0), "max_new_tokens"),
    (dict(max_new=5000), "max_new_tokens"),
    (dict(pair="no such pair"), ("Unknown model pair", "no such pair is not in the list of choices")),
    (dict(target_id="../../etc"), "allowed model roots"),
    (dict(draft_id="/etc"), "allowed model roots"),
    (dict(target_id="someone/needs-remote-code"), "Could not load"),
    (dict(policy="sideways"), ("Unknown k policy", "is not in the list of choices: ['fixed k'")),
    (dict(target_precision="int8"), ("target precision must be one of", "is not in the list of choices")),
    (dict(draft_precision="fp8"), ("Unknown draft precision", "is not in the list of choices")),
    (dict(drafter="early exit", exit_layer=5), "early-exit layer must be a whole number from 1 to"),
]


def test_bad_input_gets_a_clear_message_and_a_concurrent_run_is_unaffected(app_server, client):
    reference = call(client, args(**SETTINGS[1]))[1]
    normal: list = []
    runner = threading.Thread(target=lambda: normal.append(call(Client(app_server, verbose=False), args(**SETTINGS[1]))))
    runner.start()
    for bad, words in BAD:
        try:
            status, _ = call(client, args(**bad))
        except Exception as exc:  # Gradio's own validation of a component's range: its message must be clear too
            status = str(exc)
        words = (words,) if isinstance(words, str) else words
        assert any(w in status for w in words), (bad if len(str(bad)) < 200 else list(bad), status[:300])
        assert "Traceback" not in status
    runner.join(timeout=300)
    assert normal and "Done" in normal[0][0] and normal[0][1] == reference


def test_markup_in_the_prompt_is_text(client):
    status, tokens = call(client, args(prompt='<script>alert(1)</script><img src=x onerror="alert(2)">'))
    assert "Done" in status
    assert "<script" not in tokens and "<img" not in tokens
    assert "&lt;script&gt;" in tokens and "&lt;img" in tokens


def test_incompatible_tokenizers_are_refused(client, app_models):
    status, _ = call(client, args(draft_id=str(app_models / "other")))
    assert "incompatible" in status and "vocabulary sizes differ" in status


def test_a_truncated_model_file_is_reported_and_the_app_keeps_serving(client, app_models):
    broken = app_models / "broken"
    broken.mkdir(exist_ok=True)
    for f in (app_models / "target").iterdir():
        data = f.read_bytes()
        (broken / f.name).write_bytes(data[: len(data) // 3] if f.suffix == ".safetensors" else data)
    status, _ = call(client, args(target_id=str(broken), drafter="prompt lookup"))
    assert "Could not load" in status
    status, tokens = call(client, args())
    assert "Done" in status and "tok-" in tokens


def test_stop_mid_run_then_a_normal_run_matches_solo(app_server, client):
    solo = call(client, args(**SETTINGS[0]))[1]
    job = client.submit(*args(prompt="Once upon a time", k=1, max_new=400), api_name="/generate")
    deadline = time.monotonic() + 60
    while job.status().code.name not in RUNNING and time.monotonic() < deadline:
        time.sleep(0.02)
    assert time.monotonic() < deadline, "the run never started"
    time.sleep(0.5)
    assert not job.done(), "the run finished before the stop: the cancellation was not exercised"
    assert job.cancel() is True
    time.sleep(0.5)
    assert job.status().code.name == "CANCELLED"
    status, tokens = call(client, args(**SETTINGS[0]))
    assert "Done" in status and tokens == solo
