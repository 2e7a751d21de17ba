"""Progress events of long commands, written to a job's `progress.jsonl` (the format of `mascot.train.progress`).

Modules wrap their long loops in `tracked(...)`, which draws the usual tqdm bar and logs `started`, `progress`
and `done` events to the `mascot.progress` logger. The entry point (`python -m mascot --progress FILE ...`)
attaches a `ProgressFileHandler` to that logger; without one the events go nowhere.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from mascot.train.progress import ProgressLog

T = TypeVar("T")
LOGGER = logging.getLogger("mascot.progress")
LOGGER.setLevel(logging.INFO)
LOGGER.propagate = False  # progress is for the job file, not the console log


def event(step: str, status: str, done: int | None = None, total: int | None = None,
          metrics: dict[str, Any] | None = None, message: str = "") -> None:
    """Log one progress event (a no-op unless a handler is attached)."""
    if LOGGER.handlers:
        LOGGER.info("%s %s", step, status, extra={"progress": {"step": step, "status": status, "done": done,
                                                                "total": total, "metrics": metrics, "message": message}})


def tracked(iterable: Iterable[T], *, step: str, total: int | None = None, desc: str | None = None,
            bar: bool = True, unit: str = "it", every: float = 1.0) -> Iterator[T]:
    """Iterate with a tqdm bar (when `bar`) and progress events for `step` (at most one per `every` seconds,
    and always the last)."""
    from tqdm.auto import tqdm

    if total is None:
        try:
            total = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    event(step, "started", 0, total)
    last, done = 0.0, 0
    for item in tqdm(iterable, total=total, desc=desc or step, disable=not bar, unit=unit):
        yield item
        done += 1
        if time.monotonic() - last >= every:
            last = time.monotonic()
            event(step, "progress", done, total)
    event(step, "done", done, total)


class ProgressFileHandler(logging.Handler):
    """Writes each progress record as one line of a `progress.jsonl`."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(logging.INFO)
        self.log = ProgressLog(path)

    def emit(self, record: logging.LogRecord) -> None:
        p = getattr(record, "progress", None)
        if p:
            try:
                self.log.event(p["step"], p["status"], p.get("done"), p.get("total"), p.get("metrics"),
                               p.get("message") or "")
            except OSError:
                self.handleError(record)


def attach(path: str | Path) -> ProgressFileHandler:
    """Send progress events to `path` from now on."""
    handler = ProgressFileHandler(path)
    LOGGER.addHandler(handler)
    return handler
