"""What a run of the Run tab looks like: the coloured text, the comparison with the target alone and its race, the
summary panel, the charts, the latest round's tree, the trace files. Pure of the runner: functions of a CurrentRun
(a live one, or a recorded one that recorded_runs.py opens)."""

from __future__ import annotations

import html
import time
from dataclasses import asdict, fields

import gradio as gr

from playground import decoding, trace
from playground.trace import sametext, tracefile
from playground.core.numbers import fmt
from playground.trace.replay import decoded_table
from playground.core.records import RoundRecord
from playground.ui import budget
from playground.ui.common import View, status_html
from playground.ui.state import CurrentRun, SessionState
from playground.views import charts, draftfree, race, tokens
from playground.views import tree as tree_view

SPEEDUPS = (
    "Leviathan ideal (v = 1, this run's c)",
    "calibrated to this run (its own c and v(k), its first pass)",
    "measured (target alone ran, interleaved)",
)
# Some segments ran under load, others not (trace.quiet_part): the measured speedup is the quiet segments'.
MEASURED_QUIET = "measured (target alone ran, interleaved; the segments without other load)"
# Without the interleaved target alone, c and v(k) rest on the runner's calibration: said so, never shown as the run's.
CALIBRATED_BEFORE = "calibrated to the start-up's measurement (another time and load: not this run's)"
NOISY = 0.2  # the target alone's step varying more than this between segments: the load changed during the run
SOURCES = {
    trace.IN_RUN: trace.IN_RUN,
    trace.CALIBRATION: "V(1) from the runner's calibration before this run, not measured in it",
}


MEMORY_LINE = "\n\n"  # the summary's last paragraph: the memory line (memory_again)

# ---------------------------------------------------------------- the views of a run


def panels(run: CurrentRun) -> tuple[str, tuple]:
    """The summary panel and the four charts: the same function while streaming and at the end."""
    return summary_markdown(run.summary(), run), charts.all_charts(trace.frame(run.rounds))


def final_view(run: CurrentRun, state: SessionState, message: str, level: str) -> View:
    """Everything at the end of a run (or when stopped): text, comparison, summary, charts, downloads."""
    spec_html = tokens.render_rounds(run.rounds, run.tokenizer, run.spec.prompt) + draftfree.legend(run.rounds)
    comparison = compare_html(run, spec_html) + race_view(run) if run.baseline_done else ""
    summary, (acc, lat, hist, pos) = panels(run)
    csv_path, json_path = write_trace(run, state) if run.rounds else (None, None)
    state.charge("run", "downloads")  # the budget for what sessions keep (ui/budget.py) may drop older things
    summary += MEMORY_LINE + budget.line(state, state.ledger)  # what that budget counts of this session
    news = state.news()  # what it dropped of this session since its last status line
    return View(
        status=status_html(f"{message} {news}" if news else message, level),
        tokens=spec_html,
        compare=comparison,
        summary=summary,
        acceptance=acc,
        latency=lat,
        histogram=hist,
        positions=pos,
        tree=tree_panel(run),
        csv=gr.update(value=csv_path, interactive=csv_path is not None),
        json=gr.update(value=json_path, interactive=json_path is not None),
    )


def memory_again(view: View, state: SessionState) -> View:
    """The view with its memory line as the budget counts the session now (a recorded run becomes the session's
    run only once its view is made)."""
    summary = view.summary.rsplit(MEMORY_LINE, 1)[0]
    return view._replace(summary=summary + MEMORY_LINE + budget.line(state, state.ledger))


def in_panel(record: RoundRecord) -> bool:
    """Whether the round panel shows this round: a token tree, or a round whose extras views.draftfree explains
    (the match, the window) and that drafted."""
    return record.is_tree or (record.k > 0 and draftfree.explains(record))


def tree_panel(run: CurrentRun) -> str:
    """The latest round the panel shows (in_panel) as a tree (views.tree.tree_html), after what a draft-free
    strategy did in it (views.draftfree: the match, the window); "" when no round qualifies."""
    at = next((i for i in range(len(run.rounds) - 1, -1, -1) if in_panel(run.rounds[i])), None)
    if at is None:
        return ""
    record = run.rounds[at]
    context = [t for r in run.rounds[:at] for t in r.new_tokens]  # the output before that round
    about = draftfree.explain_html(record, run.tokenizer, context)
    heading = f"<h4>Round {record.round + 1}, the latest that drafted</h4>" if about else ""
    return heading + about + (tree_view.tree_html(record, run.tokenizer, context) if record.is_tree else "")


def race_view(run: CurrentRun) -> str:
    """The replay race of a compared run: each token at the moment its round ended in its own measured run."""
    return race.race_html(
        run.rounds, run.baseline, run.tokenizer, run.spec.prompt, f"Speculative ({run.spec.drafter.label})"
    )


def precisions(run: CurrentRun) -> str:
    """What ran: "target bf16 · draft int8" (the drafter's Strategy.ran)."""
    draft = decoding.strategy(run.spec.drafter.kind).ran.format(draft=run.draft_precision, target=run.target_precision)
    kernels = " (batch-invariant kernels)" if run.invariant else ""
    return " · ".join(p for p in (f"target {run.target_precision}{kernels}", draft) if p)


TTFT = "time to first token (the prompt's passes and the first round)"
# a round 0 that fed the target no prompt: the start-up kept the example prompt's prefill (playground/run/prefixes.py)
TTFT_KEPT = (
    "time to first token (the first round; the target's prefill of this example prompt was kept from the start-up)"
)


def kept_prefill(run: CurrentRun) -> bool:
    """Whether the run started from a kept prefill: its round 0 fed the target no prompt token but the last, and
    the prompt had more (a one-token prompt's round 0 feeds none either; None: a trace that did not say)."""
    return bool(run.rounds) and run.rounds[0].prefill == 0 and (run.prompt_tokens is None or run.prompt_tokens > 1)


def summary_markdown(s: dict, run: CurrentRun) -> str:
    """The summary panel: the three speedups side by side, each with what it assumes; then the measures."""
    k = max(1, round(s["mean_k"])) if s["mean_k"] else None
    measured = fmt(s["speedup"], 2, "×") if run.baseline_done else "– (tick *Compare with target alone*)"
    in_run = s["step_source"] == trace.IN_RUN
    labels = SPEEDUPS if in_run else (SPEEDUPS[0], CALIBRATED_BEFORE, SPEEDUPS[2])
    labels = (*labels[:2], MEASURED_QUIET) if s["loaded_segments"] else labels
    speedups = (
        f"**Speedup over the target alone** (k = {fmt(k)}, α of evaluated drafts = {fmt(s['alpha_eval'], 3)})\n\n"
        f"| {' | '.join(labels)} |\n|---|---|---|\n"
        f"| **{fmt(s['theory_speedup'], 2, '×')}** | **{fmt(s['calibrated_speedup'], 2, '×')}** | **{measured}** |"
    )
    base = f" (target alone: {fmt(s['baseline_tokens_per_s'], 1)})" if run.baseline_done else ""
    source = SOURCES.get(s["step_source"], s["step_source"])
    rows = [
        ("tokens/s", fmt(s["tokens_per_s"], 1) + base),
        (TTFT_KEPT if kept_prefill(run) else TTFT, fmt(s["ttft_s"], 2, " s")),
        ("precisions that ran", precisions(run)),
        ("α acceptance (accepted / drafted)", fmt(s["alpha"], 3)),
        ("mean accepted tokens per round", fmt(s["mean_accepted"], 2)),
        ("tokens per round", fmt(s["tokens_per_round"], 2)),
        (f"c, draft cost per token in target steps (target step: {source or '–'})", fmt(s["c"], 3)),
        ("v, verify cost per round in target steps", fmt(s["v"], 2)),
        ("best k, calibrated model (this α, c and the measured v(k))", fmt(s["best_k_calibrated"])),
        ("best k, Leviathan ideal (v = 1)", fmt(s["best_k"])),
        ("rounds · tokens · time", f"{s['rounds']} · {s['tokens']} · {fmt(s['wall_s'], 2, ' s')}"),
    ]
    by_source = trace.kept_by_source(run.rounds)
    if by_source:  # a draft-free strategy: where its kept drafts came from
        rows.insert(
            5,
            (
                "kept drafts by source",
                " · ".join(f"{draftfree.SOURCES.get(k, ('', k))[1]}: {n}" for k, n in by_source.items()),
            ),
        )
    if s["planned_steps"] == s["planned_steps"]:  # a sized tree: what its plans expected, against what happened
        measured = s["mean_k"] * s["c"] + s["v"]
        rows.insert(
            6,
            (
                "sized tree: tokens per round and target steps per round, planned · measured",
                f"{fmt(s['planned_tokens_per_round'], 2)} in {fmt(s['planned_steps'], 2)} · "
                f"{fmt(s['tokens_per_round'], 2)} in {fmt(measured, 2)}",
            ),
        )
    own = decoding.strategy(run.spec.drafter.kind).summary  # the strategy's own rows (staged drafting's first level)
    rows[5:5] = own(s) if own is not None and run.rounds else []
    if s["segments"]:  # right under tokens/s: how far the measured speedup can be trusted
        rows.insert(1, ("segments, interleaved: the speedup in each (the first left out)", spread(s)))
    table = "| measure | value |\n|---|---|\n" + "\n".join(f"| {name} | **{value}** |" for name, value in rows)
    return speedups + "\n\n" + table


def spread(s: dict) -> str:
    """How far the segments of an interleaved comparison agreed: their speedups' range and how much the target
    alone's step varied between them, with a warning when that says the machine's load changed mid-run."""
    low, high, step = s["segment_speedup_min"], s["segment_speedup_max"], s["step_spread"]
    text = f"{s['segments']} segments · {fmt(low, 2, '×')} to {fmt(high, 2, '×')}"
    if step == step:  # nan: a single segment, no spread to tell
        text += f" · the target alone's step varied {step:.0%}"
    if s["loaded_segments"]:  # trace.quiet_part: those segments are left out of the speedup, c and v
        return text + (
            f" · ⚠ {s['loaded_segments']} ran while other programs used the CPU (the loop ran on fewer threads): "
            f"{fmt(s['speedup_loaded'], 2, '×')} there, {fmt(s['speedup_all'], 2, '×')} over the whole run; the "
            f"speedup, c and v above are the other segments'"
        )
    if step > NOISY:
        text += " · ⚠ noisy: the load changed during the run (both sides shared it; a quiet rerun is steadier)"
    return text


def comparison_verdict(run: CurrentRun) -> tuple[str, str]:
    """(message, level) of the speculative output against the target alone's."""
    if run.spec.decode.temperature > 0:
        return (
            "Sampling (temperature > 0): both follow the target's distribution, but the random draws differ, "
            "so the texts need not match."
        ), "info"
    result = sametext.compare_outputs(run.rounds, run.baseline, run.target_precision, exact=run.invariant)
    if result["equal"]:
        return "Identical outputs: greedy speculative decoding reproduced the target exactly.", "ok"
    at = result["position"]
    gaps = [g for g in (result["gap_spec"], result["gap_base"]) if g == g]
    gap = fmt(min(gaps), 3) if gaps else "not recorded"
    if run.invariant:  # a position's logits are the same in every pass: any difference is a bug
        return (
            f"The outputs differ from token {at} on (top-2 logit gap {gap}). With the batch-invariant kernels "
            f"every position gets the same logits in a pass of 1 and of k + 1 tokens, so this is a bug: please "
            f"report it with the trace JSON."
        ), "error"
    if result["near_tie"]:
        return (
            f"The outputs are identical up to token {at}, where the target's top-2 logit gap was {gap}: a near-tie "
            f"that {run.target_precision} rounding can flip with torch's stock kernels (the pass of k + 1 tokens "
            f"and the pass of 1 round differently). From there the two continue differently. Tick "
            f"*Exact numerics* to give every position the same logits in every pass."
        ), "info"
    return (
        f"The outputs differ from token {at} on, and the target's top-2 logit gap there was {gap}: not a near-tie, "
        f"so this is not rounding."
    ), "error"


def compare_html(run: CurrentRun, spec_html: str) -> str:
    """Both texts side by side with their speeds, under the verdict."""
    spec, base = trace.summarize(run.rounds), trace.summarize(run.baseline)
    verdict, level = comparison_verdict(run)
    base_html = tokens.render_rounds(run.baseline, run.tokenizer, run.spec.prompt)
    drafter = html.escape(run.spec.drafter.label)
    return (
        f'<div class="compare">{status_html(verdict, level)}<div class="compare-cols">'
        f'<div class="compare-col"><h4>Speculative ({drafter}) · {fmt(spec["tokens_per_s"], 1)} tokens/s</h4>{spec_html}</div>'
        f'<div class="compare-col"><h4>Target alone · {fmt(base["tokens_per_s"], 1)} tokens/s</h4>{base_html}</div>'
        f"</div></div>"
    )


def write_trace(run: CurrentRun, state: SessionState) -> tuple[str, str]:
    """trace.csv and trace.json in the session's download folder (only for a finished or stopped run)."""
    spec = run.spec
    meta = {
        "recorded_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "pair": spec.pair.name,
        "target": spec.pair.target,
        "draft": spec.pair.draft if spec.drafter.needs_draft_model else None,
        "drafter": spec.drafter.kind.value,
        "drafter_options": {f.name: getattr(spec.drafter.options, f.name) for f in fields(spec.drafter.options)},
        "target_precision": run.target_precision,
        "draft_precision": run.draft_precision,
        "invariant": run.invariant,
        "chosen_precisions": [p.value if p else None for p in (spec.pair.target_precision, spec.drafter.precision)],
        "config": asdict(spec.decode),
        "prompt": spec.prompt,
        "prompt_tokens": run.prompt_tokens,
    }
    baseline = run.baseline if run.baseline_done else None  # the summary is the panel's: same rounds, baseline, profile
    segments = run.segments if run.baseline_done else None
    csv_path, json_path = state.downloads.write(
        {
            "trace.csv": tracefile.to_csv(run.rounds),
            "trace.json": tracefile.to_json(
                run.rounds, baseline, run.profile, decoded_table(run.tokenizer), segments, **meta
            ),
        }
    )
    return csv_path, json_path
