"""A soak (issue 44): clients at once through the real queue (gradio_client against `python app.py` on the tiny
pairs, loopback only), each doing a mix of runs (suffix decoding with its session memory among them), uploads,
Stops mid-run and departures mid-run, until a deadline; then, with the load gone, the time the device takes to be
free after a Stop and after a client departs, as the next user sees it. It measures the server's resident memory
against the start plus the sessions' budget (PLAYGROUND_SESSION_MB, small here so that the budget drops things),
and counts errors.

Each client has its own network address (X-Forwarded-For, which uvicorn takes as the address on a connection from
this machine), as users behind a proxy do, so the per-address cap (8 places) does not turn 40 clients into 8; the
queue's 32 places then fill, and Gradio's "Queue is full" is counted as the refusal it is. Clients wait up to 60 s
for an answer to a request (httpx's default is 5 s; a browser waits longer).

Short by default (CI: 5 clients, SOAK_SECONDS 45); `SOAK_LONG=1` runs the issue's long soak (40 clients, 30 min).
Run with -s to see the figures; SOAK_REPORT=path writes them as JSON.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from gradio_client import Client

from playground.models import tiny
from tests.conftest import free_port
from tests.load.test_load import LONG, QUEUED, args, running

LONG_SOAK = os.environ.get("SOAK_LONG") == "1"
CLIENTS = 40 if LONG_SOAK else 5
SECONDS = float(os.environ.get("SOAK_SECONDS", 1800 if LONG_SOAK else 45))
BUDGET_MB = 64  # the app's PLAYGROUND_SESSION_MB here: small, so that the soak makes the budget drop things
MARGIN_MB = 500  # the goal: resident memory at most weights + budget + 500 MB (the start holds the weights)
STOP_FREE_S, DEPART_FREE_S = 1.0, 5.0  # the goals: the device free after a Stop, after a departure
ROOT = Path(__file__).resolve().parents[2]
TRACE = (ROOT / "assets" / "runs" / "code.json").read_bytes()
REFUSALS = ("runs waiting or running", "Queue is full")  # a cap's answer (jobs.refusal) or Gradio's full queue
PATIENCE_S = 60.0  # how long a client waits for the answer to one request


def address(seed: int) -> dict:
    """Client `seed`'s own network address, as the header a proxy would add."""
    return {"X-Forwarded-For": f"10.44.{seed // 200}.{seed % 200 + 1}"}


def client(url: str, seed: int) -> Client:
    return Client(url, verbose=False, headers=address(seed), httpx_kwargs={"timeout": PATIENCE_S})


def refused(text: str) -> str:
    """The tally's name for a refusal in `text` ("" when it is none)."""
    if REFUSALS[0] in text:
        return "refused: cap"
    return "refused: queue full" if REFUSALS[1] in text else ""


@pytest.fixture(scope="module")
def soak_app(tmp_path_factory):
    """`python app.py` on the tiny pairs on a free loopback port, with a 64 MB sessions' budget: (url, pid)."""
    root = tmp_path_factory.mktemp("soak")
    port = free_port()
    env = dict(
        os.environ,
        PLAYGROUND_PAIRS_FILE=str(tiny.write_pairs_file(root)),
        PLAYGROUND_MODEL_ROOTS=str(root),
        PLAYGROUND_DEFAULT_PAIR="tiny (test)",
        PLAYGROUND_SESSION_MB=str(BUDGET_MB),
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        GRADIO_TEMP_DIR=str(root / "gradio-cache"),
        HF_HUB_OFFLINE="1",
        GRADIO_ANALYTICS_ENABLED="False",
        OMP_NUM_THREADS="1",
    )
    log = open(root / "app.log", "w")
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (root / "app.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "app.py did not start in 120 s"
            time.sleep(0.5)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _upload(url: str, seed: int) -> int:
    """POST a recorded run's trace to Gradio's upload route, as the page's *Open a trace JSON* does: the status."""
    boundary = uuid.uuid4().hex
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="trace.json"\r\n'
        f"Content-Type: application/json\r\n\r\n".encode()
        + TRACE
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        url + "gradio_api/upload",
        data=body,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"} | address(seed),
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _depart(url: str, seed: int) -> str:
    """A client that submits a long run and leaves while it runs (its process ends: the connection closes)."""
    code = (
        f"import os, time\nfrom gradio_client import Client\n"
        f"job = Client({url!r}, verbose=False, headers={address(seed)!r}, httpx_kwargs={{'timeout': {PATIENCE_S}}})"
        f".submit(*{args(**LONG)!r}, api_name='/generate')\n"
        f"deadline = time.monotonic() + 120\n"
        f"while job.status().code.name not in {QUEUED!r} and time.monotonic() < deadline:\n    time.sleep(0.02)\n"
        f"code = job.status().code.name\n"
        f"why = str(job.exception()) if code == 'FINISHED' and job.done() and job.exception() else ''\n"
        f"print(code, why.replace(chr(10), ' ')[:200], flush=True)\ntime.sleep(0.5)\nos._exit(0)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300).stdout.strip()


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.errors: list[str] = []

    def add(self, what: str, error: str = "") -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1
            if error:
                self.errors.append(f"{what}: {error[:300]}")


def _client(url: str, seed: int, until: float, tally: Tally) -> None:
    rng = random.Random(seed)
    me = client(url, seed)
    while time.monotonic() < until:
        action = rng.choices(["run", "suffix", "upload", "stop", "depart"], [4, 3, 2, 1, 1])[0]
        try:
            if action in ("run", "suffix"):
                drafter = "suffix decoding" if action == "suffix" else rng.choice(["draft model", "prompt lookup"])
                a = args(
                    drafter=drafter,
                    max_new=rng.choice([16, 32, 64]),
                    seed=rng.randrange(100),
                    suffix_memory=action == "suffix",  # suffix decoding's memory of earlier runs
                )
                status = me.predict(*a, api_name="/generate")[0]
                if refused(status):
                    tally.add(refused(status))
                else:
                    tally.add(action, "" if "Done" in status else status)
            elif action == "upload":
                code = _upload(url, seed)
                tally.add(action, "" if code in (200, 429) else f"HTTP {code}")
            elif action == "stop":
                job = me.submit(*args(**LONG), api_name="/generate")
                try:
                    running(job, "the run to stop")
                except AssertionError:  # refused at admission (a cap) never runs: the cap's answer, not an error
                    if job.done() and refused(str(job.exception())):
                        tally.add(refused(str(job.exception())))
                        continue
                    if job.done():
                        raise
                    job.cancel()  # still waiting after 120 s behind the others: Stop while it waits
                    tally.add("stop while waiting")
                    continue
                time.sleep(0.3)
                job.cancel()
                tally.add(action)
            else:
                left = _depart(url, seed)
                if refused(left):  # refused at admission (a cap): it never ran, so never left
                    tally.add(refused(left))
                    continue
                code = left.split(" ")[0]
                tally.add(action, "" if code in QUEUED or code == "IN_QUEUE" else f"the client saw {left!r}")
        except Exception as exc:  # noqa: BLE001  counted: the soak asserts there were none
            if refused(str(exc)):  # a cap's answer (jobs.refusal) or a full queue: what the caps are for
                tally.add(refused(str(exc)))
            else:
                tally.add(action, f"{type(exc).__name__}: {exc}")


def _next_wait(url: str) -> tuple[float, str]:
    """Seconds a new client's short run waits for the device, and its status."""
    job = Client(url, verbose=False).submit(*args(max_new=8), api_name="/generate")
    start = time.monotonic()
    running(job, "the next user's run")
    return time.monotonic() - start, job.result(timeout=300)[0]


def test_soak_mixed_clients_then_the_device_is_free_soon_after_a_stop_and_a_departure(soak_app):
    import psutil

    url, pid = soak_app
    app = psutil.Process(pid)
    assert "Done" in Client(url, verbose=False).predict(*args(max_new=8), api_name="/generate")[0]  # warm
    rss_start = app.memory_info().rss / 2**20
    tally, peak = Tally(), [rss_start]
    until = time.monotonic() + SECONDS
    threads = [threading.Thread(target=_client, args=(url, seed, until, tally)) for seed in range(CLIENTS)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak.append(app.memory_info().rss / 2**20)
        time.sleep(1.0)
    for t in threads:
        t.join()
    rss_end = app.memory_info().rss / 2**20
    print(f"\nsoak phase: {json.dumps(tally.counts)}, {len(tally.errors)} errors: {tally.errors[:5]}", flush=True)

    # with the load gone: the next user's wait after a Stop mid-run, and after a client left mid-run
    stops, departs = [], []
    for _ in range(2):
        me = Client(url, verbose=False)
        job = me.submit(*args(**LONG), api_name="/generate")
        running(job, "the run to stop")
        time.sleep(0.3)
        job.cancel()
        wait, status = _next_wait(url)
        stops.append(wait)
        assert "Done" in status, status
        assert _depart(url, CLIENTS) in QUEUED
        wait, status = _next_wait(url)
        departs.append(wait)
        assert "Done" in status, status
    figures = dict(
        clients=CLIENTS,
        seconds=SECONDS,
        budget_mb=BUDGET_MB,
        actions=tally.counts,
        errors=len(tally.errors),
        rss_start_mb=round(rss_start, 1),
        rss_peak_mb=round(max(peak), 1),
        rss_end_mb=round(rss_end, 1),
        next_wait_after_stop_s=[round(s, 2) for s in stops],
        next_wait_after_departure_s=[round(s, 2) for s in departs],
    )
    print("\nsoak:", json.dumps(figures))
    if os.environ.get("SOAK_REPORT"):
        Path(os.environ["SOAK_REPORT"]).write_text(json.dumps(figures, indent=1))
    assert tally.errors == [], tally.errors[:5]
    assert max(peak) - rss_start <= BUDGET_MB + MARGIN_MB, figures
    assert max(stops) < STOP_FREE_S, figures
    assert max(departs) < DEPART_FREE_S, figures
