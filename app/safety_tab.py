"""The researcher's Safety tab: how many user messages the crisis check put in each tier (crisis,
concern, none), by deciding layer, and how many persona replies the output check replaced.
Wiring only: the counts come from `mascot.safety.events`, which never stores message text.

Call `render_safety_tab(settings)` inside `with gr.Tab("Safety"):` of the researcher (admin) app.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pandas as pd

from app.settings import Settings
from mascot.safety.events import INPUT, OUTPUT, SafetyLog
from mascot.safety.multilingual import status as multilingual_status

TIER_ORDER = ("crisis", "concern", "none")


def safety_tables(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(counts per tier, counts per tier and layer, output-check counts) for the log at `path`."""
    events = SafetyLog(path)
    try:
        tiers = events.tier_counts(INPUT)
        layers = events.layer_counts(INPUT)
        outputs = events.tier_counts(OUTPUT)
    finally:
        events.close()
    per_tier = pd.DataFrame([{"tier": t, "messages": tiers.get(t, 0)} for t in TIER_ORDER])
    per_layer = pd.DataFrame(sorted(({"tier": t, "layer": layer, "messages": n} for (t, layer), n in layers.items()),
                                    key=lambda r: (TIER_ORDER.index(r["tier"]) if r["tier"] in TIER_ORDER else 9, r["layer"])),
                             columns=["tier", "layer", "messages"])
    out = pd.DataFrame([{"persona replies": k, "count": outputs.get(k, 0)} for k in ("replaced", "passed")])
    return per_tier, per_layer, out


def render_safety_tab(settings: Settings) -> None:
    """Build the Safety tab inside the current Blocks context."""
    path = settings.safety_log
    gr.Markdown("### Crisis check\nDecisions on user messages since the log began (tier, score and layer are logged; "
                f"message text never is). Log: `{path}`")
    first = safety_tables(path)
    layer_status = gr.Markdown(multilingual_status(), elem_id="safety-layers")
    tiers = gr.Dataframe(first[0], label="Messages per tier", interactive=False, elem_id="safety-tiers")
    layers = gr.Dataframe(first[1], label="Messages per tier and deciding layer", interactive=False)
    outputs = gr.Dataframe(first[2], label="Output check on persona replies", interactive=False)
    refresh = gr.Button("↻ Refresh", size="sm", elem_id="safety-refresh")
    refresh.click(lambda: (multilingual_status(), *safety_tables(path)), None, [layer_status, tiers, layers, outputs],
                  queue=False)
    # the counts follow the log on their own (they were computed once, at server start)
    gr.Timer(10.0).tick(lambda: safety_tables(path), None, [tiers, layers, outputs], queue=False)
