"""What one client may run on the public chat at once, and the stop flags of the streams running now.

The model answers one call at a time (the backend's lock). With Gradio's default queue of one per event, calls wait
in arrival order, so one client sending five calls at once made everyone else wait behind all five. Instead, the
events that run the model (`MODEL_EVENTS`: `/chat`, the page's reply, regenerate and new-draw) start at once and ask
`ChatLimits` for a slot: a client (its address, as uvicorn trusts it: see MASCOT_TRUSTED_PROXIES) may have
`per_client` calls running or waiting, and the whole server `max_waiting`; beyond that the call is refused at once
with BUSY_MESSAGE, and the client simply tries again. `per_client = 0` switches this off (Gradio's queue of one, as
before).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gradio as gr

# The events of the public app that run the model (BlockFunction names: the handler functions' names).
MODEL_EVENTS = frozenset({"api_chat", "respond", "regenerate", "new_draw"})
BUSY_MESSAGE = "The companion group is busy with your earlier message; try again in a moment."
FULL_MESSAGE = "The companion group is busy with other people right now; try again in a moment."


def client_of(request: Any) -> str:
    """The client's address as the server trusts it (uvicorn replaces the TCP peer only for trusted proxies)."""
    client = getattr(getattr(request, "request", request), "client", None) or getattr(request, "client", None)
    host = getattr(client, "host", None)
    return host if isinstance(host, str) and host else "?"


class ChatLimits:
    """Slots for model calls: at most `per_client` per client address and `max_waiting` in all; thread-safe."""

    def __init__(self, per_client: int = 1, max_waiting: int = 8) -> None:
        self.per_client = per_client
        self.max_waiting = max_waiting
        self._running: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.per_client > 0

    def in_flight(self, client: str | None = None) -> int:
        """Calls holding a slot now (of one client, or of all)."""
        with self._lock:
            return self._running[client] if client is not None else sum(self._running.values())

    @contextmanager
    def hold(self, request: Any) -> Iterator[None]:
        """Hold a slot for the duration of one model call; raises gr.Error with a plain sentence when there is none."""
        if not self.enabled:
            yield
            return
        client = client_of(request)
        with self._lock:
            if self._running[client] >= self.per_client:
                raise gr.Error(BUSY_MESSAGE, title="Busy", print_exception=False)
            if sum(self._running.values()) >= self.max_waiting:
                raise gr.Error(FULL_MESSAGE, title="Busy", print_exception=False)
            self._running[client] += 1
        try:
            yield
        finally:
            with self._lock:
                self._running[client] -= 1
                if self._running[client] <= 0:
                    del self._running[client]

    def ungate(self, blocks: gr.Blocks) -> None:
        """Let the model's events start at once (no queue of one) so `hold` decides; nothing when switched off."""
        if not self.enabled:
            return
        for fn in blocks.fns.values():
            if fn.name in MODEL_EVENTS:
                fn.concurrency_limit = None


@contextmanager
def stop_flag(flags: dict[str, threading.Event], key: str) -> Iterator[threading.Event]:
    """A fresh stop flag under `key` while a stream runs (a Stop click sets it); removed when the stream ends."""
    flag = flags[key] = threading.Event()
    try:
        yield flag
    finally:
        if flags.get(key) is flag:
            del flags[key]
