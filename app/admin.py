"""The researcher app at /admin: Studies, Train, Jobs and Safety (and any tab added to ADMIN_TABS), behind a login.

To add a researcher tab, append `(title, module, function)` to ADMIN_TABS; the function is called as
`function(settings)` inside `with gr.Tab(title):` (and given the chat's engine as `engine=` when it takes one). Nothing here is reachable from the public chat app
or the annotator page: it is a separate Blocks with its own login, API and file cache.
"""

from __future__ import annotations

import importlib
import inspect

import gradio as gr

from app.settings import Settings
from app.ui import hide_page_events
from mascot.group.engine import Engine

# The one place that lists the researcher tabs, in display order.
ADMIN_TABS: tuple[tuple[str, str, str], ...] = (
    ("Studies", "app.studies_tab", "render_studies_tab"),
    ("Train", "app.admin_tab", "render_admin_tab"),
    ("Jobs", "app.jobs_tab", "render_jobs_tab"),
    ("Safety", "app.safety_tab", "render_safety_tab"),
)


def _optional_tab(title: str, module: str, func: str, settings: Settings, engine: Engine | None = None) -> None:
    """Render a tab whose module may be absent in a trimmed install; explain instead of crashing."""
    with gr.Tab(title):
        try:
            render = getattr(importlib.import_module(module), func)
            if "engine" in inspect.signature(render).parameters:
                render(settings, engine=engine)
            else:
                render(settings)
        except ImportError as exc:
            gr.Markdown(f"This tab is unavailable: `{exc}`")


def build_admin_app(settings: Settings, engine: Engine | None = None,
                    tabs: tuple[tuple[str, str, str], ...] = ADMIN_TABS) -> gr.Blocks:
    """The researcher Blocks (mount it behind a login with `app.server.build_server`); `engine` is the chat's, which
    the Train tab can put a run live in."""
    with gr.Blocks(title="MASCOT researcher") as admin:
        gr.Markdown("## MASCOT · researcher tools\nStudies (blind human evaluation), training, jobs for every stage of "
                    "the pipeline, and safety-check counts. "
                    "Annotators use `/annotate/`; the public chat is at `/`.")
        with gr.Tabs():
            for title, module, func in tabs:
                _optional_tab(title, module, func, settings, engine)
    # Gradio embeds the API description in the page it serves before login; with every event private
    # that description is empty, so the login page tells an anonymous visitor nothing about these tools.
    hide_page_events(admin, keep=())
    return admin
