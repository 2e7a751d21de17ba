"""HTTP server: the main app at `/` and the blind annotator page at `/annotate`, on one port."""

from __future__ import annotations

import logging

import gradio as gr
from fastapi import FastAPI

from app.settings import Settings
from app.ui import CSS, build_app
from mascot.engine import Engine

log = logging.getLogger(__name__)


def build_server(settings: Settings, engine: Engine | None = None) -> FastAPI:
    """A FastAPI app with the annotator page mounted before the main app (so `/annotate` wins)."""
    server = FastAPI(title="MASCOT")
    try:
        from app.annotate_page import build_annotate_page

        annotate = build_annotate_page(settings)
        server = gr.mount_gradio_app(server, annotate, path="/annotate", footer_links=[])
    except ImportError as exc:  # the annotation extra is part of the default install; this is a guard
        log.warning("annotator page unavailable: %s", exc)
    main = build_app(settings, engine)
    return gr.mount_gradio_app(server, main, path="", css=CSS, footer_links=[])


def serve(settings: Settings, engine: Engine | None = None) -> None:
    import uvicorn

    app = build_server(settings, engine)
    print(f"MASCOT is running on http://{settings.host}:{settings.port}  (annotators: /annotate/?study=ID&annotator=ID)",
          flush=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning")
