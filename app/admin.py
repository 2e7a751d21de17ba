"""The researcher app at /admin: Studies, Train, Jobs and Safety (and any tab added to ADMIN_TABS), behind a login.

To add a researcher tab, append `(title, module, function)` to ADMIN_TABS; the function is called as
`function(settings)` inside `with gr.Tab(title):`. Nothing here is reachable from the public chat app
or the annotator page: it is a separate Blocks with its own login, API and file cache.
"""

from __future__ import annotations

import importlib

import gradio as gr

from app.settings import Settings
from app.ui import hide_page_events

# The one place that lists the researcher tabs, in display order.
ADMIN_TABS: tuple[tuple[str, str, str], ...] = (
    ("Studies", "app.studies_tab", "render_studies_tab"),
    ("Train", "app.admin_tab", "render_admin_tab"),
    ("Jobs", "app.jobs_tab", "render_jobs_tab"),
    ("Safety", "app.safety_tab", "render_safety_tab"),
)


def _optional_tab(title: str, module: str, func: str, settings: Settings) -> None:
    """Render a tab whose module may be absent in a trimmed install; explain instead of crashing."""
    with gr.Tab(title):
        try:
            getattr(importlib.import_module(module), func)(settings)
        except ImportError as exc:
            gr.Markdown(f"This tab is unavailable: `{exc}`")


def build_admin_app(settings: Settings, tabs: tuple[tuple[str, str, str], ...] = ADMIN_TABS) -> gr.Blocks:
    """The researcher Blocks (mount it behind a login with `app.server.build_server`)."""
    with gr.Blocks(title="MASCOT researcher") as admin:
        gr.Markdown("## MASCOT · researcher tools\nStudies (blind human evaluation), training, jobs for every stage of "
                    "the pipeline, and safety-check counts. "
                    "Annotators use `/annotate/`; the public chat is at `/`.")
        with gr.Tabs():
            for title, module, func in tabs:
                _optional_tab(title, module, func, settings)
    # Gradio embeds the API description in the page it serves before login; with every event private
    # that description is empty, so the login page tells an anonymous visitor nothing about these tools.
    hide_page_events(admin, keep=())
    return admin
