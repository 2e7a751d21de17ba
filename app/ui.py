"""Build the public app at `/`: the companion-group chat, nothing else.

The engine (model + adapters) is loaded once here and shared by every session. Researcher tools
(Studies, Train) live in the separate, login-protected app of `app/admin.py` at /admin, and the blind
annotator page (`app/annotate_page.py`) at /annotate; `app/server.py` mounts all three. Only the
documented `/chat` endpoint is listed by the public API; the page's own events are private.
"""

from __future__ import annotations

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
PUBLIC_API = ("chat",)  # the only endpoints the public app documents for API clients


def engine_config(settings: Settings) -> EngineConfig:
    return EngineConfig(backend=settings.backend, model=settings.model, dtype=settings.dtype,
                        base_url=settings.openai_base_url, checkpoints_dir=settings.checkpoints_dir)


def hide_page_events(blocks: gr.Blocks, keep: tuple[str, ...] = PUBLIC_API) -> None:
    """Mark every event except the `keep` API endpoints private (not listed, not for API clients)."""
    for fn in blocks.fns.values():
        if fn.api_name not in keep:
            fn.api_visibility = "private"


def build_app(settings: Settings, engine: Engine | None = None) -> gr.Blocks:
    """The public chat Blocks; `engine` may be injected (tests use the fake backend)."""
    engine = engine or get_engine(engine_config(settings))
    with gr.Blocks(title="MASCOT companion group") as demo:
        gr.Markdown("## MASCOT · a companion group that talks with you\n"
                    "Several characters share one conversation; a director decides who speaks and how. "
                    "Not a substitute for professional help.")
        render_chat_tab(engine, settings)
    hide_page_events(demo)
    return demo
