"""What the UI's per-token records cost (python -m playground.bench --record-overhead N): the same spec with
record on and off, interleaved through one session."""

from __future__ import annotations

import statistics

from playground import trace
from playground.core.errors import PlaygroundError
from playground.core.progress import Progress, quiet
from playground.run.runner import Runner
from playground.run.spec import RunSpec


def record_overhead(runner: Runner, spec: RunSpec, reps: int, progress: Progress = quiet) -> dict:
    """What the UI's per-token records cost: the same spec with record on and off, interleaved `reps`
    times through the runner; medians of tokens/s (trace.summarize) and the relative slowdown."""
    if reps < 1:
        raise PlaygroundError(f"--record-overhead takes a number of repetitions >= 1, got {reps!r}.")
    tps: dict[bool, list[float]] = {True: [], False: []}
    with runner.session(spec, progress) as session:
        loaded = session.ready().pair
        for rep in range(reps):
            progress(f"record on/off: {rep + 1}/{reps}", rep / reps)
            for record in (True, False):
                rounds = list(session.rounds(spec.with_decode(record=record)))
                tps[record].append(trace.summarize(rounds)["tokens_per_s"])
    on, off = statistics.median(tps[True]), statistics.median(tps[False])
    return dict(
        drafter=spec.drafter.label,
        k=spec.decode.k_label,
        reps=reps,
        target_precision=loaded.target_precision.value,
        draft_precision=loaded.draft_precision.value if loaded.draft_precision else "",
        record_on_tps=on,
        record_off_tps=off,
        overhead=(off - on) / off,
        runs_on=tps[True],
        runs_off=tps[False],
    )
