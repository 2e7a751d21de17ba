"""How every Gradio app of the server is mounted safely: Gradio's own file checks switched on,
explicit allowed/blocked paths, an upload size limit, no uploads to the open apps, and limits on failed
logins per client address and per account name.

Why this module exists: `gr.mount_gradio_app` never calls `launch()`, so Gradio's `Blocks.has_launched`
stays False and `gradio.processing_utils._check_allowed` returns early. Any input shaped like
`{"path": P, "meta": {"_type": "gradio.FileData"}}` then makes Gradio copy P into its cache and serve it.
`launch()` sets `has_launched = True` once its server runs (blocks.py); `mount_app` below does the same
right after mounting, so the checks `launch()` would give apply to mounted apps too: inputs may only
name files that were uploaded, outputs only files under the allowed folders, and never anything under
`blocked_paths`.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import gradio as gr
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.types import Message

from app.settings import Settings

PROJECT_ROOT = Path(__file__).resolve().parent.parent
MAX_FAILED_LOGINS = 5  # per client address and login path, within LOGIN_WINDOW_S
LOGIN_WINDOW_S = 300.0
MAX_ACCOUNT_FAILURES = 20  # per account name and login path from all addresses together, within ACCOUNT_WINDOW_S
ACCOUNT_WINDOW_S = 900.0
MAX_LOGIN_BYTES = 16 * 1024  # a login form holds a name and a password
MAX_ACCOUNT_CHARS = 200
# Gradio routes that store a sent file (the open apps have no file input, so they refuse these).
UPLOAD_ROUTES = ("/gradio_api/upload", "/gradio_api/process_recording")


def private_paths(settings: Settings) -> list[str]:
    """Folders no app may ever serve: the project (recipes, packs, logs, .git), the data folder (the
    annotation database), checkpoints and training runs, and the current working directory."""
    paths = {PROJECT_ROOT, Path.cwd(), Path(settings.data_dir), Path(settings.checkpoints_dir),
             Path(settings.runs_dir)}
    if settings.annotation_db_url.startswith("sqlite:///"):
        paths.add(Path(settings.annotation_db_url.removeprefix("sqlite:///")).parent)
    upload = Path(gr.utils.get_upload_folder()).resolve()
    # Never block the folder Gradio keeps uploads in (a GRADIO_TEMP_DIR under the project would be).
    return sorted({str(p.resolve()) for p in paths if not _contains(p.resolve(), upload)})


def _contains(parent: Path, child: Path) -> bool:
    return child == parent or parent in child.parents


class AdminFiles:
    """A private temp folder for files made for researchers (exports, charts), served by /admin only.

    Gradio keeps every app's cached files in one shared upload folder; the admin app's components
    get their own cache here instead, and the public apps list this folder in `blocked_paths`.
    """

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="mascot-admin-")).resolve()
        self.cache = self.root / "cache"
        self.exports = self.root / "exports"
        self.cache.mkdir()
        self.exports.mkdir()

    def adopt(self, blocks: gr.Blocks) -> None:
        """Point the cache of every component of `blocks` into this private folder."""
        blocks.GRADIO_CACHE = str(self.cache)
        for block in blocks.blocks.values():
            block.GRADIO_CACHE = str(self.cache)


_ADMIN_FILES: AdminFiles | None = None
_ADMIN_FILES_LOCK = threading.Lock()


def admin_files() -> AdminFiles:
    """The process's one private folder for researcher files (created on first use)."""
    global _ADMIN_FILES
    with _ADMIN_FILES_LOCK:
        if _ADMIN_FILES is None:
            _ADMIN_FILES = AdminFiles()
        return _ADMIN_FILES


def mount_app(server: FastAPI, blocks: gr.Blocks, path: str, settings: Settings, *,
              allowed: Sequence[str | Path] = (), blocked: Sequence[str | Path] = (), show_error: bool = False,
              **kwargs: Any) -> FastAPI:
    """`gr.mount_gradio_app` with Gradio's file checks on, explicit paths and an upload limit.

    `show_error=False` sends visitors only the messages of `gr.Error` (Gradio shows those either way),
    never the text of an unexpected exception."""
    server = gr.mount_gradio_app(
        server, blocks, path=path, footer_links=[], show_error=show_error,
        allowed_paths=[str(Path(p).resolve()) for p in allowed],
        blocked_paths=sorted({*private_paths(settings), *(str(Path(p).resolve()) for p in blocked)}),
        max_file_size=f"{settings.max_upload_mb}mb", enable_monitoring=False, run_history=False, **kwargs,
    )
    # What launch() sets once its server is up; without it _check_allowed lets every path through.
    blocks.has_launched = True
    return server


def refuse_uploads(server: FastAPI, mounts: Sequence[str]) -> None:
    """Answer 403 to every file sent to the apps mounted at `mounts` (apps with no file input: the chat at
    "" and the annotator page): Gradio's upload and screen-recording routes, and any multipart body to their
    API (the component server reads file parts too), so anonymous visitors cannot fill the disk or plant files."""
    roots = [m.rstrip("/") for m in mounts]
    targets = {root + route for root in roots for route in UPLOAD_ROUTES}
    apis = tuple(f"{root}/gradio_api/" for root in roots)

    @server.middleware("http")
    async def no_uploads(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        path = request.url.path.rstrip("/")
        multipart = request.headers.get("content-type", "").lower().lstrip().startswith("multipart/")
        if request.method != "GET" and (path in targets or (multipart and path.startswith(apis))):
            return JSONResponse({"detail": "This app takes no file uploads."}, status_code=403)
        return await call_next(request)


class LoginLimiter:
    """Counts failed logins per key (an address or account name, and the login path) in a sliding window;
    thread-safe."""

    def __init__(self, max_failures: int = MAX_FAILED_LOGINS, window_s: float = LOGIN_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.clock = clock
        self._failures: dict[tuple[str, str], deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    def _recent(self, key: tuple[str, str]) -> deque[float]:
        q = self._failures[key]
        while q and self.clock() - q[0] > self.window_s:
            q.popleft()
        if len(self._failures) > 10_000:  # forget keys whose failures all expired
            now = self.clock()
            for stale in [k for k, v in self._failures.items() if k != key and (not v or now - v[-1] > self.window_s)]:
                del self._failures[stale]
        return q

    def retry_after(self, key: tuple[str, str]) -> float:
        """Seconds until `key` may try again (0 when it may try now)."""
        with self._lock:
            q = self._recent(key)
            if len(q) < self.max_failures:
                return 0.0
            return max(1.0, self.window_s - (self.clock() - q[0]))

    def failed(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._recent(key).append(self.clock())


async def login_name(request: Request) -> str:
    """The account name a login form gives, stripped as Gradio strips it ('' when there is none).

    Reads the body through `request.body()`, which Starlette's http middleware caches and replays to the
    login route, then parses it with Starlette's form parser and limits (the ones the route uses)."""
    body = await request.body()

    async def replay() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        async with Request(request.scope, replay).form() as form:
            name = form.get("username")
    except (HTTPException, MultiPartException):
        return ""
    return name.strip()[:MAX_ACCOUNT_CHARS] if isinstance(name, str) else ""


class LoginGuard:
    """Wraps every `.../login` POST of a server: 429 once a client address, or one account name from all
    addresses together, failed too often on that login path.

    The address is `request.client`, the TCP peer: uvicorn replaces it with the `X-Forwarded-For` client only
    for peers in `MASCOT_TRUSTED_PROXIES` (see `app.server.uvicorn_options`), so a client rotating that header
    keeps one address. The per-account cap stops guessing from many real addresses; it may also lock the
    account's owner out for its window, which is the price of not letting a botnet guess on."""

    def __init__(self, per_address: LoginLimiter | None = None, per_account: LoginLimiter | None = None) -> None:
        self.per_address = per_address or LoginLimiter()
        self.per_account = per_account or LoginLimiter(MAX_ACCOUNT_FAILURES, ACCOUNT_WINDOW_S)

    def install(self, server: FastAPI) -> None:
        @server.middleware("http")
        async def limit_logins(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
            path = request.url.path.rstrip("/")
            if request.method != "POST" or not path.endswith("/login"):
                return await call_next(request)
            length = request.headers.get("content-length", "")
            if not length.isdigit() or int(length) > MAX_LOGIN_BYTES:
                return JSONResponse({"detail": f"A login form is sent with a Content-Length of at most "
                                               f"{MAX_LOGIN_BYTES:,} bytes."}, status_code=413 if length else 411)
            address = request.client.host if request.client else "?"
            checks = ((self.per_address, (address, path), "from your address"),
                      (self.per_account, (await login_name(request), path), "for this account"))
            for limiter, key, whose in checks:
                wait = int(limiter.retry_after(key))
                if wait:
                    return JSONResponse({"detail": f"Too many failed logins {whose}; try again in {wait} s."},
                                        status_code=429, headers={"Retry-After": str(wait)})
            response = await call_next(request)
            if response.status_code >= 400:
                for limiter, key, _ in checks:
                    limiter.failed(key)
            return response
