"""How every Gradio app of the server is mounted safely: Gradio's own file checks switched on,
explicit allowed/blocked paths, an upload size limit, and a per-address limit on failed logins.

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

from app.settings import Settings

PROJECT_ROOT = Path(__file__).resolve().parent.parent
MAX_FAILED_LOGINS = 5  # per client address and login path, within LOGIN_WINDOW_S
LOGIN_WINDOW_S = 300.0


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
              allowed: Sequence[str | Path] = (), blocked: Sequence[str | Path] = (),
              **kwargs: Any) -> FastAPI:
    """`gr.mount_gradio_app` with Gradio's file checks on, explicit paths and an upload limit."""
    server = gr.mount_gradio_app(
        server, blocks, path=path, footer_links=[],
        allowed_paths=[str(Path(p).resolve()) for p in allowed],
        blocked_paths=sorted({*private_paths(settings), *(str(Path(p).resolve()) for p in blocked)}),
        max_file_size=f"{settings.max_upload_mb}mb", enable_monitoring=False, run_history=False, **kwargs,
    )
    # What launch() sets once its server is up; without it _check_allowed lets every path through.
    blocks.has_launched = True
    return server


def refuse_uploads(server: FastAPI, mounts: Sequence[str]) -> None:
    """Answer 403 to uploads sent to the apps mounted at `mounts` (apps with no file input: the chat at
    "" and the annotator page), so anonymous visitors cannot fill the disk or plant files."""
    targets = {f"{m.rstrip('/')}/gradio_api/upload" for m in mounts}

    @server.middleware("http")
    async def no_uploads(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if request.method == "POST" and request.url.path.rstrip("/") in targets:
            return JSONResponse({"detail": "This app takes no file uploads."}, status_code=403)
        return await call_next(request)


class LoginLimiter:
    """Counts failed logins per (client address, login path) in a sliding window; thread-safe."""

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
        if len(self._failures) > 10_000:  # forget addresses whose failures all expired
            for stale in [k for k, v in self._failures.items() if not v and k != key]:
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

    def install(self, server: FastAPI) -> None:
        """Wrap every `.../login` POST of `server`: refuse with 429 once an address failed too often."""

        @server.middleware("http")
        async def limit_logins(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
            if request.method != "POST" or not request.url.path.rstrip("/").endswith("/login"):
                return await call_next(request)
            key = (request.client.host if request.client else "?", request.url.path.rstrip("/"))
            wait = self.retry_after(key)
            if wait:
                return JSONResponse(
                    {"detail": f"Too many failed logins from your address; try again in {int(wait)} s."},
                    status_code=429, headers={"Retry-After": str(int(wait))})
            response = await call_next(request)
            if response.status_code >= 400:
                self.failed(key)
            return response
