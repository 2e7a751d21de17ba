"""A finished job's report as a table: the individual evaluation's CSV (one row per system and metric, persona
means as columns), a group evaluation's systems, a sweep's profiles, the safety evaluation's overall figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd


def result_table(path: str | Path) -> pd.DataFrame:
    """The report at `path` as a DataFrame (empty when there is none yet)."""
    p = Path(path) if path else None
    if p is None or not p.is_file():
        return pd.DataFrame()
    if p.suffix == ".csv":
        df = pd.read_csv(p)
        if {"system", "persona", "metric", "mean"} <= set(df.columns):
            return (df.pivot_table(index=["system", "metric"], columns="persona", values="mean", aggfunc="mean")
                    .round(2).reset_index().rename_axis(columns=None))
        return df
    data = json.loads(p.read_text(encoding="utf-8"))
    if "profiles" in data:
        return pd.DataFrame([{"profile": prof, **{s: v.get("mean") for s, v in systems.items()}}
                             for prof, systems in data["profiles"].items()])
    if "systems" in data:
        return pd.DataFrame([{"system": name, **{k: v for k, v in s.items() if _scalar(v) and k != "label"}}
                             for name, s in data["systems"].items() if isinstance(s, dict)])
    if "detector" in data:
        return pd.DataFrame([{"layer": layer, "measure": key, **_flat(v)}
                             for layer in ("patterns", "detector") for key, v in data[layer].get("overall", {}).items()])
    return pd.DataFrame([{"field": k, "value": v} for k, v in data.items() if _scalar(v)])


def _scalar(v: Any) -> bool:
    return isinstance(v, (int, float, str, bool)) or v is None


def _flat(v: Any) -> dict[str, Any]:
    if isinstance(v, dict):
        return {k: x for k, x in v.items() if _scalar(x)}
    return {"value": v}


def result_figure(table: pd.DataFrame) -> Any:
    """A bar chart of a report's headline score per system (`result_table`'s rows; individual: Overall; group: the
    mean; sweep: the mean over profiles), as a matplotlib Figure; None when the report has no such score."""
    if table.empty:
        return None
    if {"system", "metric", "Overall"} <= set(table.columns):
        rows = table[table["metric"] == "overall"]
        names, values, label = list(rows["system"]), list(rows["Overall"]), "Overall (0-100)"
    elif {"system", "mean"} <= set(table.columns):
        names, values, label = list(table["system"]), list(table["mean"]), "group score (0-100)"
    elif "profile" in table.columns:
        systems = [c for c in table.columns if c != "profile"]
        names, values, label = systems, [float(table[c].mean()) for c in systems], "mean over profiles (0-100)"
    else:
        return None
    if not names:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 0.5 + 0.45 * len(names)), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    bars = ax.barh(names, values, color="#2563eb")
    ax.bar_label(bars, fmt="%.1f", padding=3)
    ax.invert_yaxis()
    ax.set_xlabel(label)
    ax.set_xlim(0, max(100.0, max(values) * 1.1))
    return fig
