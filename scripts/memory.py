"""Resident memory of `python app.py` (default pair, default precisions) over N identical 128-token
runs through the API: python scripts/memory.py [N]. Prints the RSS after each run and the peak."""

import os, subprocess, sys, time
from pathlib import Path

import psutil
from gradio_client import Client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from playground import models

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
port = os.environ.get("MEMORY_PORT", "7911")
env = dict(os.environ, GRADIO_SERVER_PORT=port)
env.pop("PLAYGROUND_DTYPE", None)
proc = subprocess.Popen(
    [sys.executable, "app.py"],
    cwd=Path(__file__).resolve().parent.parent,
    env=env,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.STDOUT,
)
ps = psutil.Process(proc.pid)
for _ in range(120):
    try:
        c = Client(f"http://127.0.0.1:{port}/", verbose=False)
        break
    except Exception:
        time.sleep(1)
print("idle rss GiB", round(ps.memory_info().rss / 2**30, 2), flush=True)
a = [
    models.DEFAULT_PAIR,
    "",
    "",
    "default",
    True,
    "draft model",
    "default",
    0,
    *[4, 32, True, 1.0, 0.1, 24, False, 5, 3, 3, False],  # self int4's, suffix's and lookahead's options (unused here)
    4,
    "",
    "adaptive (theory)",
    0.4,
    0.0,
    1.0,
    128,
    0,
    "Write a Python function that checks whether a string is a palindrome.",
    False,
]
peak = 0
for i in range(N):
    t = time.time()
    job = c.submit(*a, api_name="/generate")
    while not job.done():
        peak = max(peak, ps.memory_info().rss)
        time.sleep(0.2)
    out = job.outputs()[-1]
    print(
        f"run {i + 1}: {time.time() - t:.0f} s rss {ps.memory_info().rss / 2**30:.2f} GiB peak {peak / 2**30:.2f}  status {out[0][:90]!r}",
        flush=True,
    )
proc.terminate()
