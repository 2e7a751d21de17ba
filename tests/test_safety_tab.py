"""The researcher's Safety tab: counts per tier (and layer) from the safety log, built in Blocks."""

from __future__ import annotations

import gradio as gr

from app.safety_tab import render_safety_tab, safety_tables
from app.settings import Settings
from mascot.safety.events import INPUT, OUTPUT, SafetyLog, default_log_path


def test_safety_tables_count_tiers_layers_and_replacements(tmp_path):
    path = default_log_path(tmp_path)
    log = SafetyLog(path)
    for tier, layer in [("crisis", "pattern"), ("crisis", "classifier"), ("concern", "classifier"), ("none", "classifier")]:
        log.record(INPUT, tier, 0.5, layer, "s1")
    log.record(OUTPUT, "replaced", 1.0, "pattern:dose", "s1")
    log.close()
    tiers, layers, outputs = safety_tables(path)
    assert dict(zip(tiers["tier"], tiers["messages"])) == {"crisis": 2, "concern": 1, "none": 1}
    assert list(layers.itertuples(index=False, name=None))[0] == ("crisis", "classifier", 1)
    assert dict(zip(outputs["persona replies"], outputs["count"])) == {"replaced": 1, "passed": 0}
    empty = safety_tables(tmp_path / "missing.sqlite")[0]
    assert empty["messages"].sum() == 0
    with gr.Blocks():
        render_safety_tab(Settings(data_dir=str(tmp_path), backend="fake"))
