"""Round records -> a DataFrame, a summary, CSV and JSON. Pure functions, no model."""

from __future__ import annotations

import math
import statistics

import pandas as pd

from playground.core import theory
from playground.core.records import COLUMNS, LOADED, RoundRecord, SizedExtras, counts

NAN = float("nan")


def frame(rounds: list[RoundRecord]) -> pd.DataFrame:
    """One row per round: RoundRecord.as_dict (a strategy's extras as columns: draft_text, tree_parents, ...)."""
    df = pd.DataFrame([r.as_dict() for r in rounds], columns=COLUMNS)
    df["latency_s"] = df["draft_s"] + df["verify_s"]
    df["acceptance"] = df["accepted"] / df["k"].where(df["k"] > 0)
    return df


def _parents(r) -> list[int]:
    """A tree round's parent of each node, [] for a chain (a RoundRecord, or a row of `frame`, as the charts pass)."""
    tree = getattr(r, "tree", None)
    return tree.parents if tree is not None else list(getattr(r, "tree_parents", None) or [])


def _depths(r: RoundRecord) -> list[int]:
    """Depth of each draft token of a round (1 = right after the sequence): a chain's position + 1, a tree
    node's distance from the root."""
    parents = _parents(r)
    if not parents:
        return list(range(1, r.k + 1))
    depths: list[int] = []
    for parent in parents:  # parents come before their children
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return depths


def depth_acceptance(rounds: list[RoundRecord]) -> list[float]:
    """Per depth d = 1, 2, ...: of the rounds whose verification reached depth d (the kept path is d - 1
    long and there was a candidate at depth d under its end), the share whose kept path reached d. For a
    chain, depth d is draft position d - 1; for a tree, every candidate under the path's end counts as one
    try at that depth (the target keeps at most one of them)."""
    d_max = max((max(_depths(r), default=0) for r in rounds), default=0)
    reached, kept = [0] * d_max, [0] * d_max
    for r in rounds:
        end = r.accepted - 1  # the path's last node (chain and tree alike: the kept tokens come first); -1: the root
        parents = _parents(r)
        tried = any(p == end for p in parents) if parents else r.accepted < r.k
        for d in range(r.accepted + tried):  # depths 1 .. accepted, and the one tried after them
            reached[d] += 1
            kept[d] += d < r.accepted
    return [kept[d] / reached[d] if reached[d] else float("nan") for d in range(d_max)]


def accepted_histogram(rounds: list[RoundRecord]) -> tuple[list[int], list[float]]:
    """Draft rounds by number of kept draft tokens (0 .. max k): the measured counts, and the counts
    Leviathan et al.'s i.i.d. model expects at the run's alpha_eval, a geometric law cut at each round's
    k (P(n = j) = a^j (1 - a) for j < k, P(n = k) = a^k). Acceptances that come in runs show as more
    rounds at 0 and at k than the geometric bars."""
    drafts = [r for r in rounds if r.k > 0]
    top = max((r.k for r in drafts), default=0)
    measured = [0] * (top + 1) if drafts else []
    expected = [0.0] * (top + 1) if drafts else []
    evaluated = sum(min(r.k, r.accepted + 1) for r in drafts)
    a = sum(r.accepted for r in drafts) / evaluated if evaluated else 0.0
    for r in drafts:
        measured[r.accepted] += 1
        for j in range(r.k + 1):
            expected[j] += a**j * ((1 - a) if j < r.k else 1.0)
    return measured, expected


def speedup(tokens_per_s: float, baseline_tokens_per_s: float) -> float:
    """Speedup: tokens/s over the target alone's tokens/s on the same prompt, target, precision and
    sampling (nan without a usable baseline). The benchmark's HF rows use it with HF's own target alone."""
    return tokens_per_s / baseline_tokens_per_s if baseline_tokens_per_s > 0 else float("nan")


def batch_summary(rounds: list, tokens: int) -> dict:
    """The figures of a batched run (playground.engine.batch's rounds: per round its k, the rows that took part and
    each row's kept drafts), defined as summarize's: tokens/s = tokens of all sequences / the run's engine
    seconds (draft + verify); alpha = accepted / drafted; mean accepted = kept drafts per drafting row-round."""
    draft_s, verify_s = sum(r.draft_s for r in rounds), sum(r.verify_s for r in rounds)
    drafted = sum(r.k * len(r.rows) for r in rounds)
    accepted = sum(sum(r.accepted) for r in rounds)
    row_rounds = sum(len(r.rows) for r in rounds if r.k)
    seconds = draft_s + verify_s
    return dict(
        tokens=tokens,
        seconds=seconds,
        tokens_per_s=tokens / seconds if seconds > 0 else NAN,
        alpha=accepted / drafted if drafted else NAN,
        mean_accepted=accepted / row_rounds if row_rounds else NAN,
        draft_s=draft_s,
        verify_s=verify_s,
    )


Segments = list[tuple[int, int]]  # an interleaved comparison: per segment, (speculative rounds, target-alone rounds)
IN_RUN = "this run: the target alone's steps, interleaved with it"  # step_source when the run measured its own step
CALIBRATION = "calibration"  # step_source when V(1) came from the runner's profile, measured before this run


def summarize(
    rounds: list[RoundRecord],
    baseline: list[RoundRecord] | None = None,
    profile: theory.CostProfile | None = None,
    segments: Segments | None = None,
) -> dict:
    """Headline numbers of a run: every figure the UI, the benchmark and the reports show, defined here once.

    - tokens/s = new tokens / the run's engine time (the sum of its rounds' draft and verify seconds;
      the first round's pass includes the prompt). The same definition for the target-alone baseline.
    - time to first token (ttft_s) = the first round's draft and verify seconds: the prompt passes (the
      draft's and the target's) and the first draft, after which the first round's tokens appear together. A
      round 0 whose `prefill` is 0 fed the target no prompt: its prefill was kept (playground/run/prefixes.py).
    - speedup = tokens/s / the baseline's tokens/s (same prompt, target, precision, sampling); only when
      a baseline ran.
    - alpha = accepted / drafted; alpha_eval = accepted / evaluated (drafts after a rejection are never
      evaluated), the per-token probability of Leviathan et al.'s model.
    - one target step (step_s): with `segments` (the baseline ran interleaved with the run, sharing its load),
      the mean of the target alone's steps after its first (IN_RUN); else V(1) from the target's cost profile
      when the runner measured one (CALIBRATION: before this run, under whatever load there was then); else
      the median of this run's plain target steps; else the mean verify pass of this run ("estimated": then v
      is 1 by construction).
    - c = draft seconds per drafted token / one target step; v = mean verify seconds per draft round /
      one target step; both leave out the first round (it scores the prompt and fills the draft's cache).
    - theory_speedup: Leviathan's ideal E(alpha_eval, k) / (k c + 1), k = the mean draft length rounded;
      calibrated_speedup: the same model with v(k) from a cost profile and this run's first round (its prompt
      pass, which the target alone pays too), for this run's length (theory.run_speedup; E(alpha_eval, k) /
      (k c + v(k)) for a long run). The profile: with `segments`, this run's own (run_profile); else the
      runner's calibration.
    - with `segments`, the spread between them (segment_figures): per segment where both sides ran, its
      speedup; their min and max, and step_spread, how much the target alone's mean step varied between
      segments (max / min - 1): the machine's load changing during the run shows there.
    - with `segments`, the load: a segment ran under load when its rounds' load (RoundRecord.load: other
      processes' CPU, the loop then on fewer threads), weighted by seconds, is at least records.LOADED. With
      enough segments without it (quiet_part), the figures of time are theirs, one machine's, not a mix of two:
      step_s, c, v and the predictions' costs from their rounds; the speedup with each side's loaded tokens at its
      quiet pace (at_quiet_pace). loaded_segments counts those set apart, speedup_loaded is theirs, speedup_all
      the whole run's (always).
    - a strategy's own counts, summed over the run (staged drafting's stage_proposed, stage_accepted,
      stage_passes: extras_totals); a sized tree's plans: what they expected per round (planned).
    """
    summary = _totals(rounds)
    timed, timed_base, loaded = quiet_part(rounds, baseline or [], segments or [])
    run_step = _baseline_step(timed_base) if segments and baseline else NAN
    if run_step > 0:
        step, summary["step_source"] = run_step, IN_RUN
        profile = run_profile(timed, run_step, profile)
    else:
        step, summary["step_source"] = _target_step(rounds, profile)
    summary["step_s"] = step
    summary |= _costs(timed, step)
    summary["position_acceptance"] = depth_acceptance(rounds)  # a chain's draft positions are its depths
    summary |= extras_totals(rounds)
    summary |= _predictions(rounds, summary, profile)
    summary |= planned(rounds)
    base = summarize(baseline) if baseline else None
    summary["baseline_tokens_per_s"] = base["tokens_per_s"] if base else NAN
    summary["speedup_all"] = speedup(summary["tokens_per_s"], base["tokens_per_s"]) if base else NAN
    busy = [r for part, _ in loaded for r in part], [r for _, part in loaded for r in part]
    paced = speedup(at_quiet_pace(timed, busy[0]), at_quiet_pace(timed_base, busy[1]))
    summary["speedup"] = paced if loaded else summary["speedup_all"]
    summary |= segment_figures(rounds, baseline or [], segments or [])
    summary["loaded_segments"] = len(loaded)
    summary["speedup_loaded"] = speedup(_rate(busy[0]), _rate(busy[1])) if loaded else NAN
    return {key: summary[key] for key in SUMMARY_KEYS}


def _baseline_step(baseline: list[RoundRecord]) -> float:
    """The target alone's mean step after its first round (which scores the prompt); nan when it has none."""
    steps = [r.verify_s for r in baseline if r.round > 0]
    return sum(steps) / len(steps) if steps else NAN


def run_profile(
    rounds: list[RoundRecord], step_s: float, calibration: theory.CostProfile | None = None
) -> theory.CostProfile:
    """This run's own costs: V(1) = step_s (the target alone's mean step, interleaved with the run); V(k + 1) =
    the mean verify pass of the run's draft rounds of k drafts after the first; draft_s = its draft seconds per
    drafted token. Only the n the run never scored come from the calibration, scaled to this run's V(1) (the
    calibration's shape at this run's load): they matter to best_k_calibrated, not to this run's prediction."""
    later = _later_drafts(rounds)
    passes: dict[int, list[float]] = {}
    for r in later:
        passes.setdefault(r.k + 1, []).append(r.verify_s)
    scale = step_s / calibration.step_s if calibration is not None else 0.0
    verify = {n: s * scale for n, s in calibration.verify_s.items()} if calibration is not None else {}
    verify |= {n: sum(s) / len(s) for n, s in passes.items()}
    verify[1] = step_s
    drafted = sum(r.k for r in later)
    return theory.CostProfile(verify, sum(r.draft_s for r in later) / drafted if drafted else 0.0)


def split_segments(
    rounds: list[RoundRecord], baseline: list[RoundRecord], segments: Segments
) -> list[tuple[list[RoundRecord], list[RoundRecord]]]:
    """The rounds of each segment of an interleaved comparison: (speculative, target alone), in order."""
    out, i, j = [], 0, 0
    for n, m in segments:
        out.append((rounds[i : i + n], baseline[j : j + m]))
        i, j = i + n, j + m
    return out


def quiet_part(rounds: list[RoundRecord], baseline: list[RoundRecord], segments: Segments) -> tuple:
    """(speculative rounds, target-alone rounds) of the segments without load, and the segments under load: their
    rounds' load, weighted by seconds, at least LOADED (a sustained hog, not a browser's burst of repainting). The
    whole run and no segment when none ran under load or fewer than QUIET_AFTER_FIRST after the first did not."""
    parts = split_segments(rounds, baseline, segments)
    busy = [_load(a + b) >= LOADED for a, b in parts]
    if not any(busy) or busy[1:].count(False) < QUIET_AFTER_FIRST:
        return rounds, baseline, []
    quiet = [part for part, loaded in zip(parts, busy) if not loaded]
    return [r for a, _ in quiet for r in a], [r for _, b in quiet for r in b], [p for p, x in zip(parts, busy) if x]


QUIET_AFTER_FIRST = 1  # segments without load after the first, at least, for the run's figures to come from them


def _load(rounds: list[RoundRecord]) -> float:
    """The rounds' load (RoundRecord.load), each weighted by its seconds; 0 for no time."""
    seconds = sum(r.seconds for r in rounds)
    return sum(r.load * r.seconds for r in rounds if r.load == r.load) / seconds if seconds > 0 else 0.0


def at_quiet_pace(quiet: list[RoundRecord], loaded: list[RoundRecord]) -> float:
    """One side's tokens/s, its loaded rounds' tokens at its quiet rounds' seconds per token (round 0 left out)."""
    paced = [r for r in quiet if r.round > 0] or quiet
    pace = sum(r.seconds for r in paced) / max(1, sum(len(r.new_tokens) for r in paced))
    seconds = sum(r.seconds for r in quiet) + pace * sum(len(r.new_tokens) for r in loaded)
    tokens = sum(len(r.new_tokens) for r in quiet + loaded)
    return tokens / seconds if seconds > 0 else NAN


def segment_figures(rounds: list[RoundRecord], baseline: list[RoundRecord], segments: Segments) -> dict:
    """The spread between the segments where both sides ran: their count; the min and max of their speedups
    (each segment's tokens/s over the target alone's in the same segment); step_spread, the target alone's
    mean step per segment, max / min - 1. The first segment (it holds both prompt passes) is left out when
    others ran, as c and v leave out the first round."""
    both = [(a, b) for a, b in split_segments(rounds, baseline, segments) if a and b]
    later = both[1:] or both
    ups = [speedup(_rate(a), _rate(b)) for a, b in later]
    ups = [u for u in ups if not math.isnan(u)]
    steps = [sum(r.verify_s for r in b) / len(b) for _, b in later]
    return {
        "segments": len(both),
        "segment_speedup_min": min(ups) if ups else NAN,
        "segment_speedup_max": max(ups) if ups else NAN,
        "step_spread": max(steps) / min(steps) - 1 if len(steps) > 1 and min(steps) > 0 else NAN,
    }


def _rate(rounds: list[RoundRecord]) -> float:
    """Tokens per second of some rounds (the definition of tokens/s, on a part of a run)."""
    seconds = sum(r.seconds for r in rounds)
    return sum(len(r.new_tokens) for r in rounds) / seconds if seconds > 0 else NAN


SUMMARY_KEYS = (  # the summary's keys, in order
    *"rounds tokens wall_s ttft_s tokens_per_s drafted accepted alpha alpha_eval mean_k mean_accepted".split(),
    *"tokens_per_round draft_s verify_s step_s step_source c v position_acceptance".split(),
    *counts(None),
    *"theory_speedup calibrated_speedup best_k best_k_calibrated baseline_tokens_per_s speedup speedup_all".split(),
    *"segments segment_speedup_min segment_speedup_max step_spread loaded_segments speedup_loaded".split(),
    *"planned_tokens_per_round planned_steps".split(),
)


def planned(rounds: list[RoundRecord]) -> dict:
    """A sized tree's plans (records.SizedExtras), averaged over its rounds after the first: the tokens per round
    they expected and their expected time per round in target steps (set against tokens_per_round and the
    measured rounds); nan for every other run."""
    plans = [r.extras for r in rounds[1:] if isinstance(r.extras, SizedExtras) and r.extras.steps]
    mean = lambda name: sum(getattr(x, name) for x in plans) / len(plans) if plans else NAN
    return {"planned_tokens_per_round": mean("expected"), "planned_steps": mean("steps")}


def _totals(rounds: list[RoundRecord]) -> dict:
    """Tokens, rounds, time, drafts and acceptance of a run."""
    tokens = sum(len(r.new_tokens) for r in rounds)
    draft_s, verify_s = sum(r.draft_s for r in rounds), sum(r.verify_s for r in rounds)
    seconds = draft_s + verify_s
    drafted, accepted = sum(r.k for r in rounds), sum(r.accepted for r in rounds)
    evaluated = sum(min(r.k, r.accepted + 1) for r in rounds)  # drafts after a rejection are never evaluated
    draft_rounds = sum(1 for r in rounds if r.k > 0)
    return {
        "rounds": len(rounds),
        "tokens": tokens,
        "wall_s": seconds,
        "ttft_s": rounds[0].draft_s + rounds[0].verify_s if rounds else NAN,
        "tokens_per_s": tokens / seconds if seconds > 0 else NAN,
        "drafted": drafted,
        "accepted": accepted,
        "alpha": accepted / drafted if drafted else NAN,
        "alpha_eval": accepted / evaluated if evaluated else NAN,
        "mean_k": drafted / draft_rounds if draft_rounds else 0.0,
        "mean_accepted": accepted / draft_rounds if draft_rounds else NAN,
        "tokens_per_round": tokens / len(rounds) if rounds else NAN,
        "draft_s": draft_s,
        "verify_s": verify_s,
    }


def _later_drafts(rounds: list[RoundRecord]) -> list[RoundRecord]:
    """The draft rounds after the first (which scores the prompt and fills the draft's cache); all of them
    when only the first drafted."""
    draft_rounds = [r for r in rounds if r.k > 0]
    return [r for r in draft_rounds if r.round > 0] or draft_rounds


def _target_step(rounds: list[RoundRecord], profile: theory.CostProfile | None) -> tuple[float, str]:
    """One target step and where it came from: the profile's V(1), else this run's plain steps, else its
    mean verify pass (then v is 1 by construction)."""
    plain = [r.verify_s for r in rounds if r.k == 0 and r.round > 0]
    later = _later_drafts(rounds)
    if profile is not None:
        return profile.step_s, CALIBRATION
    if plain:
        return statistics.median(plain), "this run's plain steps"
    if later:
        return sum(r.verify_s for r in later) / len(later), "estimated (v = 1 assumed)"
    return NAN, ""


def _costs(rounds: list[RoundRecord], step: float) -> dict:
    """c (draft seconds per drafted token) and v (verify seconds per draft round), in target steps."""
    later = _later_drafts(rounds)
    drafted = sum(r.k for r in later)
    c = (sum(r.draft_s for r in later) / drafted) / step if drafted and step > 0 else NAN
    v = (sum(r.verify_s for r in later) / len(later)) / step if later and step > 0 else NAN
    return {"c": c, "v": v}


def _predictions(rounds: list[RoundRecord], s: dict, profile: theory.CostProfile | None) -> dict:
    """Leviathan's ideal and the calibrated speedup for the run's alpha_eval, mean k and c; the best k of each."""
    out = {"theory_speedup": NAN, "calibrated_speedup": NAN, "best_k": None, "best_k_calibrated": None}
    if not any(r.k > 0 for r in rounds) or math.isnan(s["c"]) or math.isnan(s["alpha_eval"]):
        return out
    alpha, c, k = s["alpha_eval"], s["c"], max(1, round(s["mean_k"]))
    out |= {"theory_speedup": theory.speedup(alpha, k, c), "best_k": theory.best_k(alpha, c)}
    if profile is not None:
        out |= {
            "calibrated_speedup": theory.run_speedup(alpha, k, c, profile, s["tokens"], rounds[0].seconds),
            "best_k_calibrated": theory.best_k_calibrated(alpha, c, profile),
        }
    return out


def kept_by_source(rounds: list[RoundRecord]) -> dict[str, int]:
    """A draft-free run's kept drafts per source ("this run", "session memory", "window", "sequence"), in the
    order first seen; {} for the other strategies (their extras have no `kept`)."""
    out: dict[str, int] = {}
    for r in rounds:
        for source in r.extras.kept(r.accepted) if hasattr(r.extras, "kept") else ():
            out[source] = out.get(source, 0) + 1
    return out


def extras_totals(rounds: list[RoundRecord]) -> dict:
    """The counts strategies add to their rounds (RoundRecord.extras), summed over the run under their
    prefixed names (stage_proposed, ...); 0 where the strategy did not run."""
    totals = dict.fromkeys(counts(None), 0)
    for r in rounds:
        for key, value in counts(r.extras).items() if r.extras is not None else ():
            totals[key] += value
    return totals


def vllm_metrics(rounds: list[RoundRecord]) -> dict:
    """The run's spec-decode figures under vLLM's names (docs/trace.md): its Prometheus counters
    (vllm:spec_decode_num_drafts, _num_draft_tokens, _num_accepted_tokens, _num_accepted_tokens_per_pos) and
    its per-request `speculative_decoding_stats`. A draft (vLLM's spec step) is a round with k > 0: a round
    where the k policy chose k = 0 is a plain target step and counts nowhere here."""
    drafts = [r for r in rounds if r.k > 0]
    k_max = max((r.k for r in drafts), default=0)
    drafted = sum(r.k for r in drafts)
    accepted = sum(r.accepted for r in drafts)
    measured, _ = accepted_histogram(rounds)
    histogram = {accepted: count for accepted, count in enumerate(measured) if count}
    return {
        "num_drafts": len(drafts),
        "num_draft_tokens": drafted,
        "num_accepted_tokens": accepted,
        "num_accepted_tokens_per_pos": [sum(r.accepted > i for r in drafts) for i in range(k_max)],
        "mean_acceptance_length": 1 + accepted / len(drafts) if drafts else float("nan"),
        "draft_acceptance_rate": accepted / drafted if drafted else float("nan"),
        "acceptance_histogram": histogram,
        "num_spec_steps": len(drafts),
        "num_accepted_draft_tokens": accepted,
        "num_spec_tokens": k_max,
        "per_step_accepted": [r.accepted for r in drafts],
        "per_step_drafted": [r.k for r in drafts],
    }
