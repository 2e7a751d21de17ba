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
