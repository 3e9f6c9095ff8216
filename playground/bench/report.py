"""docs/reports/benchmarks.md and its plotly figures, from one run's results. Pure but for writing the files."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from playground.core import numbers
from playground.bench import likelihood, targets as targets_mod
from playground.trace.results import HF_SPECULATIVE, Result, columns, grid_frame
from playground.bench.targets import geomean
from playground.views.grid import BASELINE

GROUP, GEOMEAN, MEAN = columns("group"), columns("geomean"), columns("mean")  # the summary
RUN_COLUMNS = columns("runs")
DEFINITIONS = (
    "speedup = tokens/s over the target alone at the same precision (same engine, prompt and sampling; HF rows: "
    "over HF's own target alone); tokens/s = tokens / engine time (trace.summarize); vs_best_hf = our wall-clock "
    "tokens/s over the best HF speculative configuration's (`generate` with the same draft object at k, with "
    "transformers' defaults, or prompt lookup) on the same prompt and temperature, wall clock around tokenising and "
    "generating on both sides; c = draft cost per token and v = verify cost per round, both in target steps; "
    "theory = Leviathan et al.'s ideal (1 - a^(k+1)) / ((1 - a)(k c + 1)) for the measured a and c; calibrated = "
    "the same with this machine's measured v(k) = V(k + 1) / V(1), for the run's length and with its first "
    "round (the prompt pass both runs pay; theory.run_speedup); c and v leave the first round out; calibrated_error = |calibrated - measured| / "
    "measured; greedy = output identical to the target alone's, or the position and logit gap of the first "
    "difference (a near-tie when the gap is within the precision's rounding); tree = the token tree's shape (k = "
    '"tree SHAPE", drafted by the draft model); nodes = draft tokens the target scores per pass (the mean k of '
    "the draft rounds: a tree's node count); mean_accepted = draft tokens kept per round (a tree: its kept path)."
)


def fmt(x, digits: int = 2) -> str:
    """A report's cell: numbers.fmt with "" for what is missing; a bool as "yes" / "NO"."""
    if isinstance(x, bool):
        return "yes" if x else "NO"
    return numbers.fmt(x, digits, missing="")


def greedy_cell(row: pd.Series) -> str:
    """ "yes", "near-tie at 12 (gap 0.03)", "NO at 12 (gap 2.10)", or "" for sampling."""
    if row["greedy_equal"] is None or (isinstance(row["greedy_equal"], float) and math.isnan(row["greedy_equal"])):
        return ""
    if row["greedy_equal"]:
        return "yes"
    gaps = [g for g in (row["gap_spec"], row["gap_base"]) if isinstance(g, float) and not math.isnan(g)]
    gap = f" (gap {min(gaps):.3f})" if gaps else ""
    return f"{'near-tie' if row['near_tie'] else 'NO'} at {int(row['diff_position'])}{gap}"


def markdown_table(frame: pd.DataFrame, columns: Sequence[str]) -> str:
    rows = ["| " + " | ".join(columns) + " |", "| " + " | ".join(["---"] * len(columns)) + " |"]
    for _, row in frame.iterrows():
        rows.append("| " + " | ".join(fmt(row[c]) for c in columns) + " |")
    return "\n".join(rows)


def runs_frame(results: Sequence[Result]) -> pd.DataFrame:
    df = grid_frame(results)
    df["greedy"] = [greedy_cell(row) for _, row in df.iterrows()]
    return df


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: geometric means over the categories of tokens/s and the ratios, means of alpha,
    c and v, the median calibrated error; `categories` = how many it ran on."""
    rows = []
    for key, g in frame.groupby(GROUP, sort=False, dropna=False):
        row = dict(zip(GROUP, key)) | {"categories": g["category"].nunique()}
        row |= {c: geomean(g[c]) for c in GEOMEAN}
        row |= {c: pd.to_numeric(g[c], errors="coerce").mean() for c in MEAN}
        row["calibrated_error"] = pd.to_numeric(g["calibrated_error"], errors="coerce").median()
        rows.append(row)
    return pd.DataFrame(rows, columns=GROUP + ["categories"] + GEOMEAN + MEAN + ["calibrated_error"])


def calibration_line(frame: pd.DataFrame) -> str:
    errors = pd.to_numeric(frame["calibrated_error"], errors="coerce").dropna()
    if errors.empty:
        return (
            "median |predicted - measured| / measured: no row of our engine with a calibrated prediction in this run."
        )
    within = int((errors <= 0.15).sum())
    return (
        f"median |predicted - measured| / measured = {errors.median():.3f} over {len(errors)} rows of our engine "
        f"(calibrated prediction; within 15 %: {within} of {len(errors)})."
    )


def depth_table(results: Sequence[Result]) -> str:
    """Acceptance by depth (trace.depth_acceptance) per configuration of ours, the mean over its runs."""
    rows: dict[tuple, list[list[float]]] = {}
    for r in results:
        if r.engine == "ours" and r.depth_acceptance:
            rows.setdefault((r.method, r.k, r.temperature), []).append(r.depth_acceptance)
    if not rows:
        return ""
    lines = ["| method | k | temperature | acceptance at depth 1, 2, ... |", "| --- | --- | --- | --- |"]
    for (method, k, temperature), runs in rows.items():
        depths = [
            [run[d] for run in runs if d < len(run) and not math.isnan(run[d])] for d in range(max(map(len, runs)))
        ]
        cells = " · ".join(fmt(sum(v) / len(v)) if v else "–" for v in depths)
        lines.append(f"| {method} | {k} | {fmt(temperature)} | {cells} |")
    return "\n".join(lines)


def figures(frame: pd.DataFrame) -> dict[str, go.Figure]:
    ours = frame[(frame["engine"] == "ours") & (frame["drafter"] != BASELINE)]
    vllm = (frame["engine"] == "vllm") & (frame["drafter"] != BASELINE)
    peers = frame[frame["method"].isin(HF_SPECULATIVE) | vllm]
    predicted = pd.concat(
        [
            ours.assign(model="Leviathan ideal (v = 1)", predicted=ours["theory_speedup"]),
            ours.assign(model="calibrated (measured v(k))", predicted=ours["calibrated_speedup"]),
        ]
    )
    return {
        "speedup_vs_k": px.bar(
            pd.concat([ours, peers]),
            x="k",
            y="speedup",
            color="method",
            barmode="group",
            facet_col="category",
            title="Speedup over the target alone, per prompt category",
        ),
        "measured_vs_theory": px.scatter(
            predicted,
            x="predicted",
            y="speedup",
            color="model",
            symbol="category",
            hover_data=["method", "k", "alpha", "c", "v"],
            title="Measured speedup vs predicted (measured alpha, c; ideal and calibrated)",
        ),
        "alpha_per_category": px.bar(
            ours,
            x="category",
            y="alpha",
            color="method",
            barmode="group",
            facet_col="k",
            title="Acceptance rate alpha per category",
        ),
        "vs_best_hf": px.bar(
            ours.dropna(subset=["vs_best_hf"]),
            x="category",
            y="vs_best_hf",
            color="method",
            barmode="group",
            facet_col="k",
            title="Our tokens/s over the best HF speculative configuration's",
        ),
    }


def markdown(
    results: Sequence[Result],
    env: dict,
    command: str,
    checked: list[dict],
    figure_names: Sequence[str] = (),
    peer_lines: Sequence[str] = (),
    title: str = "Benchmarks",
    docs: str = "",
) -> str:
    """The report's text: how it was made, geometric means, the peers' sections (`peer_lines`: ours against vLLM's,
    vllm.report.section, when it ran; the command line's caller gives them), the targets, the calibration line,
    every run. title: its heading; docs: the way from the report's folder to docs/ ("../" for docs/reports/), for
    its links to the guides."""
    frame = runs_frame(results)
    many_pairs = frame["pair"].nunique() > 1
    head = [c for c in summary(frame).columns if many_pairs or c != "pair"]
    run_cols = [c for c in RUN_COLUMNS if many_pairs or c != "pair"]
    lines = [
        f"# {title}",
        "",
        f"Generated by `{command}` on {env.get('date', '')}, commit `{env.get('commit', '')}`: {env.get('device', '')}, "
        f"torch {env.get('torch', '')}, {env.get('threads', '')} threads. Every number below comes from that one run; "
        "each row names its target and draft precision.",
        "",
        DEFINITIONS,
        "",
        "## Geometric mean over categories",
        "",
        markdown_table(summary(frame), head),
        "",
        *peer_lines,
        *likelihood.section(results),
        "## Targets",
        "",
        f"Read from [targets.json]({docs}targets.json) (change a target there), checked against this run; for each, the best "
        f"configuration. Why unmet ones are unmet, and which levers got how far: [levers.md]({docs}levers.md).",
        "",
        "| target | best configuration | value | goal | met |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {t['name']} | {t['best']} | {fmt(t['value'])} | {t['how']} {fmt(t['goal'])} | {fmt(t['met'])} |"
        for t in checked
    ]
    lines += ["", "## Calibrated prediction vs measured", "", calibration_line(frame), ""]
    depths = depth_table(results)
    if depths:
        lines += [
            "## Acceptance by depth",
            "",
            "Of the rounds whose verification reached depth d, the share whose kept "
            "path reached it (trace.depth_acceptance; a chain's depth d is its draft position d).",
            "",
            depths,
            "",
        ]
    if figure_names:
        lines += ["Figures: " + ", ".join(f"[{n}](figures/{n}.html)" for n in figure_names), ""]
    lines += ["## Every run", "", markdown_table(frame, run_cols), ""]
    return "\n".join(lines)


# A report file that holds this line keeps what is above it (a hand-written guide: docs/vllm.md); the report
# goes below it, its headings one level down.
KEEP_ABOVE = "<!-- python -m playground.bench --report writes below this line; edit above it -->"


def _under_guide(path: Path, text: str) -> str:
    old = path.read_text() if path.exists() else ""
    if KEEP_ABOVE not in old:
        return text
    demoted = "\n".join("#" + line if line.startswith("#") else line for line in text.splitlines())
    return old[: old.index(KEEP_ABOVE) + len(KEEP_ABOVE)] + "\n\n" + demoted + "\n"


def write_report(
    results: Sequence[Result],
    env: dict,
    command: str,
    path: str | Path,
    targets_path: str | Path | None = None,
    peer_lines: Sequence[str] = (),
    title: str = "Benchmarks",
) -> list[dict]:
    """docs/reports/benchmarks.md (or `path`), headed `title`, with its figures in figures/ next to it (named after the report unless it
    is benchmarks.md: figures/calibration-NAME.html); returns the checked targets. A file with the KEEP_ABOVE
    line keeps what is above it. peer_lines: the peers' sections (markdown's)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = path.parent / "figures"
    folder.mkdir(exist_ok=True)
    frame = runs_frame(results)
    prefix = "" if path.stem == "benchmarks" else f"{path.stem}-"  # another report's figures do not overwrite these
    figs = {prefix + name: fig for name, fig in figures(frame).items()}
    for name, fig in figs.items():
        fig.write_html(folder / f"{name}.html", include_plotlyjs="cdn")
    checked = targets_mod.check(frame, targets_mod.load_targets(targets_path))
    docs = "../" if path.parent.name == "reports" else ""  # the generated reports live in docs/reports/
    path.write_text(_under_guide(path, markdown(results, env, command, checked, list(figs), peer_lines, title, docs)))
    return checked
