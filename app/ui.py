"""Build the researcher/user app: Chat, Studies (annotation results) and Train tabs.

The engine (model + adapters) is loaded once here and shared by every session. The blind
annotator page is a separate Blocks (app/annotate_page.py) mounted at /annotate by app/server.py,
so nothing from these tabs (e.g. system names in study results) can reach an annotator's browser.
"""

from __future__ import annotations

import importlib
import logging

import gradio as gr

from app.chat_tab import render_chat_tab
from app.settings import Settings
from mascot.engine import Engine, EngineConfig, get_engine

log = logging.getLogger(__name__)

CSS = """
#chatbot .message .persona-name { font-size: 0.95em; }
footer { display: none !important; }
"""


def engine_config(settings: Settings) -> EngineConfig:
    return EngineConfig(backend=settings.backend, model=settings.model, dtype=settings.dtype,
                        base_url=settings.openai_base_url, checkpoints_dir=settings.checkpoints_dir)


def _optional_tab(title: str, module: str, func: str, settings: Settings) -> None:
    """Render a tab whose module may be absent in a trimmed install; explain instead of crashing."""
    with gr.Tab(title):
        try:
            getattr(importlib.import_module(module), func)(settings)
        except ImportError as exc:
            gr.Markdown(f"This tab is unavailable: `{exc}`")


def build_app(settings: Settings, engine: Engine | None = None) -> gr.Blocks:
    """The main Blocks app; `engine` may be injected (tests use the fake backend)."""
    engine = engine or get_engine(engine_config(settings))
    with gr.Blocks(title="MASCOT companion group") as demo:
        gr.Markdown("## MASCOT · a companion group that talks with you\n"
                    "Several characters share one conversation; a director decides who speaks and how. "
                    "Not a substitute for professional help.")
        with gr.Tabs():
            with gr.Tab("Chat", id="chat"):
                render_chat_tab(engine, settings)
            _optional_tab("Studies", "app.studies_tab", "render_studies_tab", settings)
            _optional_tab("Train", "app.admin_tab", "render_admin_tab", settings)
    return demo
