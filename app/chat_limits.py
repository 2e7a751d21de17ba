"""What one client may run on the public chat at once, and the stop flags of the streams running now.

The model answers one call at a time. With Gradio's default queue of one per event, calls wait in arrival order, so
one client sending five calls at once made everyone else wait behind all five. Instead, the events that run the model
(`MODEL_EVENTS`: `/chat`, the page's reply, regenerate and new-draw) start at once and enter `ChatLimits.hold`:
a client (its address, as uvicorn trusts it: see MASCOT_TRUSTED_PROXIES) may have `per_client` calls running or
waiting, and the server `max_waiting`; beyond that the call is refused at once with BUSY_MESSAGE (or FULL_MESSAGE).
Admitted calls take the model in arrival order, one whole call at a time (a FIFO lane: two conversations never
interleave on the model, which would make both slow). The same holds for calls that bypass Gradio's queue
(`/gradio_api/run/chat`). A call the limits would refuse is answered 429 with the same sentence before it reaches
Gradio's queue (`refuse_early`), so a client retrying in a loop costs the server next to nothing. `per_client = 0`
switches all this off (Gradio's queue of one, as before).
"""

from __future__ import annotations

import itertools
import json
import threading
import weakref
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import gradio as gr
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

# The events of the public app that run the model (BlockFunction names: the handler functions' names).
MODEL_EVENTS = frozenset({"api_chat", "respond", "regenerate", "new_draw"})
BUSY_MESSAGE = "The companion group is busy with your earlier message; try again in a moment."
FULL_MESSAGE = "The companion group is busy with other people right now; try again in a moment."
LANE_TIMEOUT_S = 900.0  # longest wait for the model before a call gives up with FULL_MESSAGE


def client_of(request: Any) -> str:
    """The client's address as the server trusts it (uvicorn replaces the TCP peer only for trusted proxies)."""
    client = getattr(getattr(request, "request", request), "client", None) or getattr(request, "client", None)
    host = getattr(client, "host", None)
    return host if isinstance(host, str) and host else "?"


class ChatLimits:
    """Admission and a FIFO lane for model calls: at most `per_client` per client address and `max_waiting` in all
    running or waiting; thread-safe."""

    def __init__(self, per_client: int = 1, max_waiting: int = 8, wait_timeout_s: float = LANE_TIMEOUT_S) -> None:
        self.per_client = per_client
        self.max_waiting = max_waiting
        self.wait_timeout_s = wait_timeout_s
        self._clients: Counter[str] = Counter()  # calls running or waiting, by client
        self._lane: deque[int] = deque()  # tickets in arrival order; the first one runs
        self._tickets = itertools.count()
        self._cond = threading.Condition()

    @property
    def enabled(self) -> bool:
        return self.per_client > 0

    def in_flight(self, client: str | None = None) -> int:
        """Calls running or waiting now (of one client, or of all)."""
        with self._cond:
            return self._clients[client] if client is not None else len(self._lane)

    def refusal(self, client: str) -> str | None:
        """The sentence `hold` would refuse a call of `client` with now, or None when it would admit one."""
        with self._cond:
            if not self.enabled:
                return None
            if self._clients[client] >= self.per_client:
                return BUSY_MESSAGE
            return FULL_MESSAGE if len(self._lane) >= self.max_waiting else None

    @contextmanager
    def hold(self, request: Any) -> Iterator[None]:
        """Admit one model call and wait for its turn on the model; raises gr.Error with a plain sentence when the
        client (or the server) has no room for another call."""
        if not self.enabled:
            yield
            return
        client = client_of(request)
        with self._cond:
            refused = self.refusal(client)  # the condition's lock is re-entrant
            if refused:
                raise gr.Error(refused, title="Busy", print_exception=False)
            ticket = next(self._tickets)
            self._lane.append(ticket)
            self._clients[client] += 1
            if not self._cond.wait_for(lambda: self._lane[0] == ticket, timeout=self.wait_timeout_s):
                self._leave(ticket, client)
                raise gr.Error(FULL_MESSAGE, title="Busy", print_exception=False)
        try:
            yield
        finally:
            with self._cond:
                self._leave(ticket, client)

    def _leave(self, ticket: int, client: str) -> None:
        """Drop `ticket` from the lane and wake the next call (call with the condition held)."""
        self._lane.remove(ticket)
        self._clients[client] -= 1
        if self._clients[client] <= 0:
            del self._clients[client]
        self._cond.notify_all()

    def ungate(self, blocks: gr.Blocks) -> None:
        """Let the model's events of `blocks` start at once (no queue of one) so `hold` decides, and remember these
        limits for `refuse_early`; nothing when switched off."""
        if not self.enabled:
            return
        _LIMITS[blocks] = self
        for fn in blocks.fns.values():
            if fn.name in MODEL_EVENTS:
                fn.concurrency_limit = None


_LIMITS: weakref.WeakKeyDictionary[gr.Blocks, ChatLimits] = weakref.WeakKeyDictionary()


def refuse_early(server: FastAPI, blocks: gr.Blocks, mount: str = "") -> None:
    """Answer 429 (with the refusal sentence and Retry-After) to a model call of `blocks`, mounted at `mount`, that its
    limits would refuse: a queue join of a model event, or `/chat` through the REST routes. Nothing when unlimited."""
    limits = _LIMITS.get(blocks)
    if limits is None:
        return
    model_fns = {index for index, fn in blocks.fns.items() if fn.name in MODEL_EVENTS}
    join = f"{mount}/gradio_api/queue/join"
    direct = {f"{mount}/gradio_api/call/chat", f"{mount}/gradio_api/run/chat"}

    @server.middleware("http")
    async def busy(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        path = request.url.path.rstrip("/")
        if request.method == "POST" and (path in direct or path == join):
            model = path in direct
            if not model:
                try:  # Starlette's http middleware keeps the body for the route
                    model = json.loads(await request.body()).get("fn_index") in model_fns
                except (ValueError, AttributeError):
                    model = False
            refused = limits.refusal(client_of(request)) if model else None
            if refused:
                return JSONResponse({"detail": refused, "error": refused}, status_code=429, headers={"Retry-After": "2"})
        return await call_next(request)


@contextmanager
def stop_flag(flags: dict[str, threading.Event], key: str) -> Iterator[threading.Event]:
    """A fresh stop flag under `key` while a stream runs (a Stop click sets it); removed when the stream ends."""
    flag = flags[key] = threading.Event()
    try:
        yield flag
    finally:
        if flags.get(key) is flag:
            del flags[key]
