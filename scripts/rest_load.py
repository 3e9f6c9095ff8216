"""Memory and temporary files of `python app.py` over many REST calls (issue 29.4): each call is
POST /gradio_api/call/generate on the tiny test pair (no session of its own, as curl sends it), then the GET that
reads its result. Prints, every --every calls, the app's resident memory, the sessions' files and folders in
Gradio's cache and in the app's temporary folder, and writes the samples as JSON (--report).

    python scripts/rest_load.py --calls 1000 --tokens 64 --report /tmp/rest_load.json

The app runs with its own GRADIO_TEMP_DIR and TMPDIR (in a fresh temporary folder, removed at the end) so that only
its own files are counted. Builds the tiny models (playground.models.tiny) there first; never uses the network.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playground.models import tiny  # noqa: E402
from playground.ui.common import Controls  # noqa: E402

PAIR = "tiny (test)"


def inputs(tokens: int, seed: int) -> list:
    """/generate's inputs: the shared controls on the tiny pair, then "Compare with target alone" (off)."""
    controls = Controls.named(  # the strategies' options: their defaults
        pair=PAIR,
        draft_id="",
        target_id="",
        target_precision="default",
        invariant=True,
        drafter="draft model",
        draft_precision="default",
        exit_layer=0,
        k=4,
        tree="",
        policy="fixed k",
        confidence=0.4,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=tokens,
        seed=seed,
        prompt="Once upon a time",
    )
    return controls.as_inputs() + [False]


def rest_call(url: str, data: list) -> str:
    """POST, then read the result as a REST client does; the final status line's text."""
    post = urllib.request.Request(
        f"{url}gradio_api/call/generate",
        data=json.dumps({"data": data}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(post, timeout=60) as response:
        event_id = json.loads(response.read())["event_id"]
    last, kind = None, ""
    with urllib.request.urlopen(f"{url}gradio_api/call/generate/{event_id}", timeout=300) as response:
        for line in response:
            if line.startswith(b"event:"):
                kind = line[6:].strip().decode()
            elif line.startswith(b"data:") and kind in ("complete", "error"):
                last = json.loads(line[5:])
    if kind != "complete" or not last or "Done" not in str(last[0]):
        raise RuntimeError(f"call failed ({kind}): {str(last)[:300]}")
    return str(last[0])


def count(folder: Path) -> tuple[int, int]:
    """(files, folders) under folder."""
    files = folders = 0
    for _, dirs, names in os.walk(folder):
        files += len(names)
        folders += len(dirs)
    return files, folders


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--every", type=int, default=100, help="calls between samples")
    parser.add_argument("--settle", type=float, default=40.0, help="seconds to wait after the last call, then sample")
    parser.add_argument("--max-minutes", type=float, default=None, help="stop calling after this long (then settle)")
    parser.add_argument("--report", type=Path, default=None)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rest-load-"))
    cache, tmp, models = work / "gradio-cache", work / "tmp", work / "models"
    for folder in (cache, tmp, models):
        folder.mkdir()
    pairs = tiny.write_pairs_file(models)
    port = free_port()
    env = dict(
        os.environ,
        PLAYGROUND_PAIRS_FILE=str(pairs),
        PLAYGROUND_MODEL_ROOTS=str(models),
        PLAYGROUND_DEFAULT_PAIR=PAIR,
        PLAYGROUND_DTYPE="fp32",
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        GRADIO_TEMP_DIR=str(cache),
        TMPDIR=str(tmp),
        HF_HUB_OFFLINE="1",
        GRADIO_ANALYTICS_ENABLED="False",
        OMP_NUM_THREADS="1",
    )
    log = open(work / "app.log", "w")
    app = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    samples = []
    try:
        deadline = time.monotonic() + 180
        while True:
            if app.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("app.py did not start:\n" + (work / "app.log").read_text()[-3000:])
            try:
                with urllib.request.urlopen(url, timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        process = psutil.Process(app.pid)

        def sample(calls: int, start: float) -> None:
            (cache_files, cache_folders), (tmp_files, tmp_folders) = count(cache), count(tmp)
            row = dict(
                calls=calls,
                seconds=round(time.monotonic() - start, 1),
                rss_mb=round(process.memory_info().rss / 2**20, 1),
                cache_files=cache_files,
                cache_folders=cache_folders,
                tmp_files=tmp_files,
                tmp_folders=tmp_folders,
            )
            samples.append(row)
            print(json.dumps(row), flush=True)

        start = time.monotonic()
        sample(0, start)
        done = 0
        while done < args.calls:
            if args.max_minutes is not None and time.monotonic() - start > 60 * args.max_minutes:
                print(f"stopped after {args.max_minutes} minutes", flush=True)
                break
            done += 1
            rest_call(url, inputs(args.tokens, seed=done))
            if done % args.every == 0:
                sample(done, start)
        if done % args.every:
            sample(done, start)
        time.sleep(args.settle)  # the REST calls' sessions expire (sessions.REST_IDLE_S) and are reaped
        sample(done, start)
    finally:
        app.terminate()
        try:
            app.wait(timeout=20)
        except subprocess.TimeoutExpired:
            app.kill()
        log.close()
        shutil.rmtree(work, ignore_errors=True)
    done = samples[-1]["calls"]
    first = next((s for s in samples if s["calls"] >= min(100, done)), samples[0])
    peak_after = max(s["rss_mb"] for s in samples if s["calls"] >= first["calls"])
    summary = dict(
        calls=done,
        tokens=args.tokens,
        rss_at_100_mb=first["rss_mb"],
        rss_peak_after_100_mb=peak_after,
        rss_final_mb=samples[-1]["rss_mb"],
        growth_after_100_mb=round(peak_after - first["rss_mb"], 1),
        seconds=samples[-1]["seconds"],
    )
    print("summary:", json.dumps(summary), flush=True)
    if args.report:
        args.report.write_text(json.dumps(dict(summary=summary, samples=samples), indent=1))


if __name__ == "__main__":
    main()
