"""The performance targets and report checks: data in docs/targets.json, checked against a run here.

A target: {"name", "metric", "filter", "over", "aggregate", "within", "goal", "how"} (the file's
"_schema" says what each means). No goal, filter or metric lives in code.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from playground.core.errors import PlaygroundError
from playground.core.config import DecodeConfig

TARGETS_FILE = Path(__file__).resolve().parents[2] / "docs" / "targets.json"
AGGREGATES = ("geomean", "mean", "median", "min", "max", "share")
CONFIG = ["pair", "method", "k", "temperature", "target_precision", "draft_precision"]


def load_targets(path: str | Path | None = None) -> list[dict]:
    """The targets of a file (default docs/targets.json), checked: a bad entry raises PlaygroundError naming it."""
    path = Path(path or TARGETS_FILE)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PlaygroundError(f"Cannot read the targets file {str(path)!r}: {exc}") from None
    targets = data.get("targets") if isinstance(data, dict) else data
    if not isinstance(targets, list):
        raise PlaygroundError(f'{path}: expected {{"targets": [...]}}.')
    for i, t in enumerate(targets):
        where = f"{path.name}: target {i + 1} ({t.get('name', '?') if isinstance(t, dict) else t!r})"
        if not isinstance(t, dict):
            raise PlaygroundError(f"{where}: not an object.")
        for key in ("name", "metric", "goal"):
            if key not in t:
                raise PlaygroundError(f"{where}: '{key}' is missing.")
        if not isinstance(t["goal"], (int, float)) or isinstance(t["goal"], bool):
            raise PlaygroundError(f"{where}: 'goal' must be a number, got {t['goal']!r}.")
        if t.get("how", ">=") not in (">=", "<="):
            raise PlaygroundError(f"{where}: 'how' must be '>=' or '<=', got {t.get('how')!r}.")
        if t.get("aggregate", "geomean") not in AGGREGATES:
            raise PlaygroundError(
                f"{where}: 'aggregate' must be one of {', '.join(AGGREGATES)}, got {t.get('aggregate')!r}."
            )
        if t.get("aggregate") == "share" and not isinstance(t.get("within"), (int, float)):
            raise PlaygroundError(f"{where}: 'share' needs a number 'within'.")
        if t.get("over", "config") not in ("config", "rows"):
            raise PlaygroundError(f"{where}: 'over' must be 'config' or 'rows', got {t.get('over')!r}.")
        if not isinstance(t.get("filter", {}), dict):
            raise PlaygroundError(f"{where}: 'filter' must be an object {{column: value or [values]}}.")
    return targets


def geomean(values) -> float:
    values = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not values or any(v <= 0 for v in values):
        return float("nan")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _matches(column: pd.Series, wanted: Any) -> pd.Series:
    wanted = wanted if isinstance(wanted, list) else [wanted]
    mask = pd.Series(False, index=column.index)
    for w in wanted:
        if isinstance(w, (int, float)) and not isinstance(w, bool):
            mask |= pd.to_numeric(column, errors="coerce") == float(w)
        else:
            mask |= column.astype(str) == str(w)
    return mask


def select(frame: pd.DataFrame, filter_: dict) -> pd.DataFrame:
    """The rows of grid_frame a filter keeps; k "default" = the default k policy's label."""
    rows = frame
    for column, wanted in filter_.items():
        if column not in frame.columns:
            raise PlaygroundError(f"targets: filter column {column!r} is not a column of the benchmark table.")
        if column == "k":
            default = DecodeConfig().k_label
            wanted = [default if w == "default" else w for w in (wanted if isinstance(wanted, list) else [wanted])]
        rows = rows[_matches(rows[column], wanted)]
    return rows


def _aggregate(values: pd.Series, target: dict) -> float:
    values = pd.to_numeric(values, errors="coerce").dropna()
    if values.empty:
        return float("nan")
    how = target.get("aggregate", "geomean")
    if how == "geomean":
        return geomean(values)
    if how == "share":
        return float((values <= float(target["within"])).mean())
    return float(getattr(values, how)())


def _label(row: pd.Series, many_pairs: bool) -> str:
    k = f" k={row['k']}" if row["k"] else ""
    precision = row["target_precision"] + (f"/{row['draft_precision']}" if row["draft_precision"] else "")
    return f"{row['method']}{k} T={row['temperature']:g} ({precision})" + (f" [{row['pair']}]" if many_pairs else "")


def check(frame: pd.DataFrame, targets: list[dict]) -> list[dict]:
    """Each target against a run: {name, metric, goal, how, value, best, rows, met}; value nan and met
    None when the run has no rows for it."""
    out = []
    for t in targets:
        metric, goal, how = t["metric"], float(t["goal"]), t.get("how", ">=")
        if metric not in frame.columns:
            raise PlaygroundError(f"targets: {t['name']!r}: metric {metric!r} is not a column of the benchmark table.")
        rows = select(frame, t.get("filter", {}))
        rows = rows[pd.to_numeric(rows[metric], errors="coerce").notna()]
        value, best = float("nan"), "(not in this run)"
        if not rows.empty and t.get("over", "config") == "rows":
            value, best = _aggregate(rows[metric], t), f"{len(rows)} rows"
        elif not rows.empty:
            scores = [(_aggregate(g[metric], t), g) for _, g in rows.groupby(CONFIG, sort=False, dropna=False)]
            scores = [(v, g) for v, g in scores if not math.isnan(v)]
            if scores:
                value, g = (max if how == ">=" else min)(scores, key=lambda s: s[0])
                best = _label(g.iloc[0], frame["pair"].nunique() > 1) + f", {len(g)} categories"
        met = None if math.isnan(value) else (value >= goal if how == ">=" else value <= goal)
        out.append(
            dict(name=t["name"], metric=metric, goal=goal, how=how, value=value, best=best, rows=len(rows), met=met)
        )
    return out
