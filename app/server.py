"""HTTP server: the public chat at `/`, the blind annotator page at `/annotate`, and the researcher
app at `/admin` (login required; disabled with instructions when no login is configured), on one port.

Every Gradio app is mounted through `app.security.mount_app`, which switches Gradio's own file checks on
for mounted apps, blocks the project, data, checkpoint and run folders, and limits upload size. Files
made for researchers live in a private cache that only `/admin` serves. Only `/admin` shows the text of
unexpected errors; the open apps show `gr.Error` messages only.
"""

from __future__ import annotations

import html
import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from app.admin_auth import ENABLE_HELP, admin_checker
from app.chat_limits import refuse_early
from app.security import LoginGuard, admin_files, mount_app, refuse_uploads
from app.settings import Settings
from app.ui import CSS, build_app
from mascot.group.engine import Engine

log = logging.getLogger(__name__)


def disabled_admin_page() -> str:
    """The page /admin answers when no login is configured: ENABLE_HELP with its `code` spans as <code>."""
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(ENABLE_HELP))
    return f"<!doctype html><title>MASCOT researcher app</title><h2>Researcher app disabled</h2><p>{text}</p>"


def _disabled_admin(server: FastAPI) -> None:
    page = disabled_admin_page()
    for path in ("/admin", "/admin/{rest:path}"):
        server.add_api_route(path, lambda: HTMLResponse(page, status_code=403), include_in_schema=False,
                             methods=["GET", "POST"])


def _add_slash(server: FastAPI, prefix: str) -> None:
    """`prefix` without its trailing slash (what people type, and what the start-up line prints) redirects to the
    mounted app at `prefix/`, keeping the query string (an annotator's study and id): Starlette's mount matches
    only `prefix/...`, so the bare path would fall through to the chat app at `/` and answer Not Found."""
    def redirect(request: Request) -> RedirectResponse:
        query = request.url.query
        return RedirectResponse(f"{prefix}/" + (f"?{query}" if query else ""), status_code=307)

    server.add_api_route(prefix, redirect, include_in_schema=False, methods=["GET", "HEAD"])


def build_server(settings: Settings, engine: Engine | None = None) -> FastAPI:
    """A FastAPI app with /annotate and /admin mounted before the public chat at / (so they win).

    `settings.auth` puts an optional login on the public chat; `settings.annotate_only` serves the
    annotator page alone (no chat, no researcher app)."""
    server = FastAPI(title="MASCOT", docs_url=None, redoc_url=None, openapi_url=None)
    LoginGuard().install(server)
    refuse_uploads(server, ["", "/annotate"])  # only /admin has file inputs (study imports)
    private = admin_files()
    try:
        from app.annotate_page import build_annotate_page

        annotate = build_annotate_page(settings)
        _add_slash(server, "/annotate")
        server = mount_app(server, annotate, "/annotate", settings, blocked=[private.root])
    except ImportError as exc:  # the annotation extra is part of the default install; this is a guard
        log.warning("annotator page unavailable: %s", exc)
    if settings.annotate_only:  # a deployment for annotators: nothing else is reachable
        server.add_api_route("/", lambda: RedirectResponse("/annotate/"), include_in_schema=False)
        return server
    if engine is None:  # one engine for the chat and the researcher app (which can put a run live in it)
        from app.ui import load_engine

        engine = load_engine(settings)
    check = admin_checker(settings)
    if check is None:
        _disabled_admin(server)
    else:
        from app.admin import build_admin_app

        admin = build_admin_app(settings, engine)
        private.adopt(admin)
        _add_slash(server, "/admin")
        server = mount_app(server, admin, "/admin", settings, allowed=[private.root], auth=check,
                           auth_message="MASCOT researcher login", show_error=True)
    main = build_app(settings, engine)
    refuse_early(server, main)  # a /chat call past the client's limit is refused before Gradio's queue
    return mount_app(server, main, "", settings, blocked=[private.root], css=CSS, auth=settings.auth_pair())


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for `settings`: `X-Forwarded-For` is believed only from `MASCOT_TRUSTED_PROXIES`
    (uvicorn's own default trusts any loopback peer, which lets a local proxy's clients pick their address)."""
    proxies = settings.proxy_list()
    return {"host": settings.host, "port": settings.port, "log_level": "warning",
            "proxy_headers": bool(proxies), "forwarded_allow_ips": ",".join(proxies)}


def startup_line(settings: Settings) -> str:
    """What `serve` prints once: the address, and what each kind of visitor opens there in this mode."""
    where = f"MASCOT is running on http://{settings.host}:{settings.port}"
    annotators = "annotators: /annotate/?study=ID&key=KEY&annotator=ID (python -m annotation link --study ID)"
    if settings.annotate_only:
        return f"{where}  (annotator page only; {annotators})"
    admin = "/admin" if admin_checker(settings) else "/admin (disabled: set MASCOT_ADMIN_PASSWORD)"
    return f"{where}  ({annotators}; researchers: {admin})"


def serve(settings: Settings, engine: Engine | None = None) -> None:
    import uvicorn

    app = build_server(settings, engine)
    print(startup_line(settings), flush=True)
    uvicorn.run(app, **uvicorn_options(settings))
