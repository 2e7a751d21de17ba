"""HTTP server: the main app at `/` and the blind annotator page at `/annotate`, on one port."""

from __future__ import annotations

import logging

import gradio as gr
from fastapi import FastAPI
from fastapi.responses import RedirectResponse

from app.settings import Settings
from app.ui import CSS, build_app
from mascot.engine import Engine

log = logging.getLogger(__name__)


def build_server(settings: Settings, engine: Engine | None = None) -> FastAPI:
    """A FastAPI app with the annotator page mounted before the main app (so `/annotate` wins).

    `settings.auth` puts a login on the main app (chat, Studies, Train); `settings.annotate_only` serves
    the annotator page alone, so annotators can never browse to pages that name the systems."""
    server = FastAPI(title="MASCOT")
    try:
        from app.annotate_page import build_annotate_page

        annotate = build_annotate_page(settings)
        server = gr.mount_gradio_app(server, annotate, path="/annotate", footer_links=[])
    except ImportError as exc:  # the annotation extra is part of the default install; this is a guard
        log.warning("annotator page unavailable: %s", exc)
    if settings.annotate_only:  # a deployment for annotators: nothing else is reachable
        server.add_api_route("/", lambda: RedirectResponse("/annotate/"), include_in_schema=False)
        return server
    main = build_app(settings, engine)
    return gr.mount_gradio_app(server, main, path="", css=CSS, footer_links=[], auth=settings.auth_pair())


def serve(settings: Settings, engine: Engine | None = None) -> None:
    import uvicorn

    app = build_server(settings, engine)
    print(f"MASCOT is running on http://{settings.host}:{settings.port}  (annotators: /annotate/?study=ID&annotator=ID)",
          flush=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning")
