"""`python -m playground.bench --under-load`: does a CPU hog that starts halfway through a comparison bend the
speedup the Run tab shows?

    python -m playground.bench --under-load --load-reps 3 --k confidence --max-new-tokens 64 --categories code

Per repeat, on one spec (the first --k, drafter, pair and prompt), three comparisons with the target alone, in an
order rotated per repeat so that none always runs first:

- "quiet, interleaved": runner.Session.compare on an idle machine (what the Run tab runs);
- "hog, interleaved": the same, with --hogs busy-loop processes started when the speculative side has half its
  tokens, and stopped when the comparison ends;
- "hog, one after the other": the old way (the speculative run, then the target alone), the hogs started at the
  same point: for contrast.

Each row: the median over the repeats of the shown (measured) speedup, its ratio to the quiet one, the whole run's
speedup and the segments run under load (set apart from the shown speedup: trace.quiet_part), and the summary's
spread between segments (trace.summarize). Speed is reported, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from typing import Iterator

from playground import trace
from playground.core.progress import Progress
from playground.core.records import RoundRecord
from playground.run.runner import Runner, Session
from playground.run.spec import RunSpec

QUIET, HOG, SEQUENTIAL = "quiet, interleaved", "hog, interleaved", "hog, one after the other"
HOG_CODE = "while True: pass"  # a pure-Python busy loop: one core's worth of load, no memory


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--under-load",
        action="store_true",
        help="instead of the grid: the Run tab's comparison quiet and with a CPU hog started halfway (bench/load.py)",
    )
    p.add_argument("--load-reps", type=int, default=3, help="repeats of each --under-load comparison (median)")
    p.add_argument("--hogs", type=int, default=1, help="busy-loop processes --under-load starts halfway")


class Hogs:
    """Busy-loop processes, started on demand and always stopped (by their own ids) when the block ends."""

    def __init__(self, count: int) -> None:
        self.count, self.procs = count, []

    def start(self) -> None:
        if not self.procs:
            self.procs = [subprocess.Popen([sys.executable, "-c", HOG_CODE]) for _ in range(self.count)]

    def __enter__(self) -> "Hogs":
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        self.procs = []


def _hog_halfway(events: Iterator[tuple[bool, RoundRecord]], hogs: Hogs | None, half: int) -> tuple[list, list]:
    """Both sides' rounds of a comparison's events; the hogs start once the speculative side has `half` tokens."""
    rounds, base = [], []
    for baseline, record in events:
        (base if baseline else rounds).append(record)
        if hogs is not None and not baseline and record.total_new >= half:
            hogs.start()
    return rounds, base


def compare_once(session: Session, spec: RunSpec, how: str, hogs: int) -> dict:
    """One comparison of `spec` with the target alone, the way `how` names; its summary (trace.summarize)."""
    half = max(1, spec.decode.max_new_tokens // 2)
    with Hogs(hogs) as hog:
        if how == SEQUENTIAL:
            rounds, _ = _hog_halfway(((False, r) for r in session.rounds(spec)), hog, half)
            base, segments = list(session.rounds(spec.baseline())), None
        else:
            rounds, base = _hog_halfway(session.compare(spec), hog if how == HOG else None, half)
            segments = session.segments
    return trace.summarize(rounds, base, session.profile(spec), segments)


def run_under_load(runner: Runner, spec: RunSpec, reps: int, hogs: int, progress: Progress) -> list[dict]:
    """Per way of comparing: the median shown speedup over `reps` repeats, its ratio to the quiet one, the
    segments' spread (medians too) and each repeat's speedup."""
    ways = [QUIET, HOG, SEQUENTIAL]
    shown: dict[str, list[dict]] = {how: [] for how in ways}
    with runner.session(spec, progress) as session:
        session.ready()
        for rep in range(reps):
            order = ways[rep % 3 :] + ways[: rep % 3]
            for how in order:
                progress(f"[{rep + 1}/{reps}] {how}", rep / reps)
                shown[how].append(compare_once(session, spec, how, hogs))
    quiet = statistics.median(s["speedup"] for s in shown[QUIET])
    rows = []
    for how in ways:
        runs = shown[how]
        speedup = statistics.median(s["speedup"] for s in runs)
        rows.append(
            dict(
                comparison=how,
                speedup=speedup,
                vs_quiet=speedup / quiet,
                whole=statistics.median(s["speedup_all"] for s in runs),
                loaded=statistics.median(s["loaded_segments"] for s in runs),
                calibrated=statistics.median(s["calibrated_speedup"] for s in runs),
                step_spread=statistics.median(s["step_spread"] for s in runs),
                segment_min=statistics.median(s["segment_speedup_min"] for s in runs),
                segment_max=statistics.median(s["segment_speedup_max"] for s in runs),
                each=[round(s["speedup"], 3) for s in runs],
            )
        )
    return rows


def main(args: argparse.Namespace, runner: Runner, spec: RunSpec, progress: Progress) -> int:
    if args.load_reps < 1 or args.hogs < 1:
        print("error: --load-reps and --hogs take whole numbers from 1", file=sys.stderr)
        return 2
    rows = run_under_load(runner, spec, args.load_reps, args.hogs, progress)
    print(f"\n{spec.pair.name} · {spec.drafter.label} · k {spec.decode.k_label} · {spec.decode.max_new_tokens} tokens")
    print(f"{args.hogs} hog(s) started halfway; medians of {args.load_reps} repeats\n")
    print(
        "| comparison | shown speedup | vs quiet | whole run | segments under load | calibrated | step spread | "
        "segments min-max | each |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['comparison']} | {r['speedup']:.2f} | {r['vs_quiet']:.2f} | {r['whole']:.2f} | {r['loaded']:g} | "
            f"{r['calibrated']:.2f} | "
            f"{r['step_spread']:.0%} | {r['segment_min']:.2f}-{r['segment_max']:.2f} | {r['each']} |"
        )
    return 0
