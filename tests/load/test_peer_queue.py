"""Issue 55: nothing a vLLM server does can hold the device queue. Through the real queue (`python app.py` on the tiny
pairs, two gradio_client clients from two addresses): user A compares with a vLLM server row whose server hangs its
completions, drips them a byte every 2 s, or answers its checks slowly; user B, from another address, asks for 8
tokens meanwhile. B's run must start within WAIT_S. Before: B had not started after 45 s (hang, drip) and waited
9.0 s behind the job's second check (slow checks). The fake servers are plain HTTP servers on 127.0.0.1.

Run with -s to see the measured waits."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
from gradio_client import Client

from playground.models import tiny
from tests.conftest import free_port
from tests.load.test_load import QUEUED, args

WAIT_S = 2.0  # the goal for another user's wait
HOLD_S = 20.0  # how long the fake servers hang or drip: the old code made B wait about this long
MODES = ("hang", "drip", "slow checks")


class _Fake(http.server.BaseHTTPRequestHandler):
    """vLLM's OpenAI-compatible server, enough for the Compare tab's row; self.server.mode says how it misbehaves."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        server = self.server
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        server.paths.append(self.path)
        checks = {"/v1/models": {"data": [{"id": "tiny"}]}, "/version": {"version": "0.0-fake"}}
        if self.path in checks or self.path == "/metrics":
            if server.mode == "slow checks" and self.path != "/metrics":
                server.closing.wait(3.0)  # under the 10 s deadline and the 5 s stall: a slow, honest answer
            body = b'vllm:num_requests_running{model_name="tiny"} 0.0\n'
            self._send(200, body if self.path == "/metrics" else json.dumps(checks[self.path]).encode())
        elif self.path == "/v1/completions":
            server.completing.set()
            answer = json.dumps({"choices": [{"token_ids": [5, 6], "text": "ab", "finish_reason": "length"}]}).encode()
            if server.mode == "drip":  # the head at once, then a byte every 2 s: never a 5 s stall
                self.send_response(200)
                self.send_header("Content-Length", str(len(answer) + 100))
                self.end_headers()
                end = time.monotonic() + HOLD_S
                with contextlib.suppress(OSError):
                    while time.monotonic() < end and not server.closing.wait(2.0):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                return
            if server.mode == "hang":
                server.closing.wait(HOLD_S)
            self._send(200, answer)
        else:  # /tokenize: not every server has it
            self._send(404, b"{}")

    def _send(self, status: int, body: bytes) -> None:
        with contextlib.suppress(OSError):
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *a: object) -> None:
        pass


@contextlib.contextmanager
def fakes() -> Iterator[dict[str, http.server.ThreadingHTTPServer]]:
    servers = {}
    for mode in MODES:
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
        httpd.daemon_threads, httpd.mode, httpd.paths = True, mode, []
        httpd.closing, httpd.completing = threading.Event(), threading.Event()
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers[mode] = httpd
    try:
        yield servers
    finally:
        for httpd in servers.values():
            httpd.closing.set()
            httpd.shutdown()
            httpd.server_close()


def url(httpd: http.server.ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture(scope="module")
def app_and_fakes(tmp_path_factory) -> Iterator[tuple[str, dict]]:
    """`python app.py` on the tiny pairs, its allow-list naming the fake servers."""
    root = tmp_path_factory.mktemp("peer-queue")
    pairs = tiny.write_pairs_file(root)
    port = free_port()
    with fakes() as servers:
        env = dict(
            os.environ,
            PLAYGROUND_PAIRS_FILE=str(pairs),
            PLAYGROUND_MODEL_ROOTS=str(root),
            PLAYGROUND_DEFAULT_PAIR="tiny (test)",
            GRADIO_SERVER_NAME="127.0.0.1",
            GRADIO_SERVER_PORT=str(port),
            HF_HUB_OFFLINE="1",
            GRADIO_ANALYTICS_ENABLED="False",
            OMP_NUM_THREADS="1",
            PLAYGROUND_VLLM_URLS=",".join(url(s) for s in servers.values()),
        )
        log = open(root / "app.log", "w")
        app = Path(__file__).resolve().parents[2] / "app.py"
        proc = subprocess.Popen([sys.executable, str(app)], cwd=app.parent, env=env, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 120
            while True:
                assert proc.poll() is None, (root / "app.log").read_text()[-3000:]
                try:
                    Client(f"http://127.0.0.1:{port}/", verbose=False)
                    break
                except Exception:  # noqa: BLE001  not up yet
                    assert time.monotonic() < deadline, "app.py did not start in 120 s"
                    time.sleep(0.5)
            yield f"http://127.0.0.1:{port}/", servers
        finally:
            proc.terminate()
            proc.wait(timeout=20)
            log.close()


def compare_args(server_url: str) -> list:
    """/compare's inputs: pairs, drafters, the shared controls, then the vLLM row (source, URL, model, target, key)."""
    return [["tiny (test)"], ["draft model"], *args(max_new=16)[:-1], "a vLLM server (URL)", server_url, "", "", ""]


def started(job, limit_s: float) -> float:
    """Seconds until the job left the queue (it runs, or it is done), at most limit_s."""
    start = time.monotonic()
    while job.status().code.name not in QUEUED and not job.done():
        if time.monotonic() - start > limit_s:
            break
        time.sleep(0.02)
    return time.monotonic() - start


@pytest.mark.parametrize("mode", MODES)
def test_another_users_run_never_waits_on_a_vllm_server(app_and_fakes, mode):
    app, servers = app_and_fakes
    server = servers[mode]
    server.completing.clear()
    a = Client(app, verbose=False, headers={"X-Forwarded-For": "10.1.1.1"})
    b = Client(app, verbose=False, headers={"X-Forwarded-For": "10.2.2.2"})
    first_paths = len(server.paths)
    job_a = a.submit(*compare_args(url(server)), api_name="/compare")
    if mode == "slow checks":  # B asks while A's check is answered slowly
        end = time.monotonic() + 60
        while len(server.paths) == first_paths and time.monotonic() < end:
            time.sleep(0.02)
    else:  # B asks once A's completion hangs or drips (our rows done)
        assert server.completing.wait(120), "A's comparison never reached the server's completions"
        time.sleep(0.5)
    job_b = b.submit(*args(max_new=8), api_name="/generate")
    wait = started(job_b, HOLD_S + 10)
    status_b = job_b.result(timeout=120)[0]
    a.predict(api_name="/compare_stop")
    server.closing.set()  # the fake lets go of what it holds
    status_a = job_a.result(timeout=60)[0]
    server.closing.clear()
    print(f"\n{mode}: B waited {wait:.2f} s; A: {status_a[:160]!r}")
    assert "Something went wrong" not in status_b and "error" not in status_b.lower()
    assert wait < WAIT_S, f"B waited {wait:.1f} s for the device while A's vLLM server was {mode}"
    if mode == "slow checks":
        checks = [p for p in server.paths[first_paths:] if p in ("/v1/models", "/version")]
        assert checks == ["/v1/models", "/version"], server.paths[first_paths:]  # checked once: not again in the job


def test_one_address_with_several_sessions_makes_another_wait_at_most_one_of_its_runs(app_and_fakes):
    """Issue 55: 300-token runs resubmitted from 4 sessions of one address made other users wait 17-23 s, about 4 of
    its runs. Now the device's waiting line is round-robin between addresses: B's run starts once A's running one
    ends, before A's waiting ones (at most one of A's runs, running or first in line, goes before B)."""
    app = app_and_fakes[0]
    sessions = [Client(app, verbose=False, headers={"X-Forwarded-For": "10.3.3.3"}) for _ in range(4)]
    a_jobs = []
    for client in sessions:  # they join in order, each once the one before is in: the first runs, the others wait
        a_jobs.append(client.submit(*args(max_new=300, k=1), api_name="/generate"))
        end = time.monotonic() + 60
        while a_jobs[-1].status().code.name not in ("IN_QUEUE", *QUEUED) and time.monotonic() < end:
            time.sleep(0.01)
    b = Client(app, verbose=False, headers={"X-Forwarded-For": "10.4.4.4"})
    job_b = b.submit(*args(max_new=8), api_name="/generate")
    end = time.monotonic() + 60
    while job_b.status().code.name not in ("IN_QUEUE", *QUEUED) and not job_b.done() and time.monotonic() < end:
        time.sleep(0.01)  # B has joined the line (on a loaded machine that can take seconds after submit)
    started = {i for i, job in enumerate(a_jobs) if job.status().code.name in QUEUED or job.done()}
    running = {i for i in started if not a_jobs[i].done()}  # a short first run may be over already: not running
    since: list[int] = []  # A's runs that started after B joined and before B started
    end = time.monotonic() + 300
    while job_b.status().code.name not in QUEUED and not job_b.done() and time.monotonic() < end:
        for i, job in enumerate(a_jobs):
            if i not in started and i not in since and (job.status().code.name in QUEUED or job.done()):
                since.append(i)
        time.sleep(0.02)
    job_b.result(timeout=120)
    for client in sessions:  # A's waiting and running runs end: the test need not wait for them
        client.predict(api_name="/stop")
    print(
        f"\nA's runs running when B joined: {sorted(running)} (over: {sorted(started - running)}); A's started before B: {since}"
    )
    # B waited for at most one of A's runs: the one running when B joined, or (the device busy with another's run)
    # the one of A's that was first in line
    assert len(running) + len(since) <= 1, (running, since)
