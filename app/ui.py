"""Build the public app at `/`: the companion-group chat, nothing else.

The engine (model + adapters) is loaded once here and shared by every session. Researcher tools
(Studies, Train, Jobs, Safety) live in the separate, login-protected app of `app/admin.py` at /admin, and the blind
annotator page (`app/annotate_page.py`) at /annotate; `app/server.py` mounts all three. Only the
documented `/chat` endpoint is listed by the public API; the page's own events are private.
"""

from __future__ import annotations

import logging
import threading

import gradio as gr

from app.chat_tab import render_chat_tab
from app.settings import Settings
from mascot.group.engine import Engine, EngineConfig, live_detector
from mascot.group.personas import load_pack

log = logging.getLogger(__name__)

CSS = """
#chatbot .message .persona-name { font-size: 0.95em; }
footer { display: none !important; }
"""
PUBLIC_API = ("chat",)  # the only endpoints the public app documents for API clients


def engine_config(settings: Settings) -> EngineConfig:
    return EngineConfig.from_settings(settings, backend=settings.backend, model=settings.model, dtype=settings.dtype,
                                      base_url=settings.openai_base_url, checkpoints_dir=settings.checkpoints_dir)


def hide_page_events(blocks: gr.Blocks, keep: tuple[str, ...] = PUBLIC_API) -> None:
    """Mark every event except the `keep` API endpoints private (not listed, not for API clients)."""
    for fn in blocks.fns.values():
        if fn.api_name not in keep:
            fn.api_visibility = "private"


def start_warm_up(engine: Engine, settings: Settings) -> None:
    """Warm the engine for the default pack in the background (`Engine.warm_up`); a first request that
    arrives meanwhile waits on the backend's lock rather than failing. MASCOT_WARMUP=0 skips it."""
    if not settings.warmup:
        return

    def run() -> None:
        try:
            log.info("warm-up took %.1f s", engine.warm_up(load_pack(settings.pack), settings.mode,
                                                                      settings.replies))
        except Exception as exc:  # noqa: BLE001 - a failed warm-up only costs the first user time
            log.warning("warm-up failed (%s: %s); the first turn will load what it needs", type(exc).__name__, exc)

    threading.Thread(target=run, name="mascot-warm-up", daemon=True).start()


def load_engine(settings: Settings) -> Engine:
    """The chat's engine for `settings`, warming up in the background."""
    engine = Engine.load(engine_config(settings), safety=live_detector(settings),
                         llm_safety_judge=settings.safety_llm_judge, careful_best_of=settings.careful_best_of)
    start_warm_up(engine, settings)
    return engine


def build_app(settings: Settings, engine: Engine | None = None) -> gr.Blocks:
    """The public chat Blocks; `engine` may be injected (tests use the fake backend)."""
    if engine is None:
        engine = load_engine(settings)
    elif engine.safety is None:  # the chat records its crisis checks where the Safety tab reads them
        engine.safety = live_detector(settings)
    with gr.Blocks(title="MASCOT companion group") as demo:
        gr.Markdown("## MASCOT · a companion group that talks with you\n"
                    "Several characters share one conversation; a director decides who speaks and how. "
                    "Not a substitute for professional help.")
        handlers = render_chat_tab(engine, settings)
    hide_page_events(demo)
    handlers.limits.ungate(demo)  # model events start at once; ChatLimits admits one per client (app/chat_limits.py)
    return demo
