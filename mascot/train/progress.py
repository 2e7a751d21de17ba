"""Progress and resumability: a JSONL progress/metrics log, a step manifest, and atomic file writes.

`<output>/progress.jsonl` gets one JSON object per event, e.g.
`{"time": 1730000000.0, "step": "grpo:anchor", "status": "progress", "done": 3, "total": 15, "metrics": {...}}`
with status in started | progress | metrics | done | skipped | failed. The admin tab follows this file.
`<output>/manifest.json` records finished steps; a finished step is skipped on the next run.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mascot.train.processes import is_main_process

STATUSES = ("started", "progress", "metrics", "done", "skipped", "failed")


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and v != v:  # NaN -> null keeps the file valid JSON
        return None
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "item"):
        return _jsonable(v.item())
    return str(v)


class ProgressLog:
    """Appends events to progress.jsonl (line-buffered, so a follower sees each line at once)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def event(self, step: str, status: str, done: int | None = None, total: int | None = None,
              metrics: dict[str, Any] | None = None, message: str = "") -> dict[str, Any]:
        assert status in STATUSES, f"unknown status {status!r}"
        row: dict[str, Any] = {"time": round(time.time(), 3), "step": step, "status": status}
        if done is not None:
            row["done"] = done
        if total is not None:
            row["total"] = total
        if metrics:
            row["metrics"] = _jsonable(metrics)
        if message:
            row["message"] = message
        if not is_main_process():  # one writer per multi-process run
            return row
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
        return row


def read_progress(path: str | Path) -> list[dict[str, Any]]:
    """All events of a progress log; a half-written last line (a writer mid-append) is ignored."""
    p = Path(path)
    if not p.exists():
        return []
    rows = []
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


class Manifest:
    """`manifest.json`: which steps finished, when, with which metrics and outputs."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.exists() else {"steps": {}}

    def done(self, step: str) -> bool:
        return step in self.data["steps"]

    def get(self, step: str) -> dict[str, Any]:
        return self.data["steps"].get(step, {})

    def mark(self, step: str, **info: Any) -> None:
        """Record a finished step. Re-reads the file under a lock first, so parallel GRPO workers (one
        process per persona) never drop each other's entries: every entry but this step's is taken from the
        file, which may hold another worker's newer entry (a worker's in-memory copy of it can be stale, e.g.
        under `--redo grpo`, when every worker started with the previous run's entries)."""
        import fcntl

        if not is_main_process():
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.path.exists():
                on_disk = json.loads(self.path.read_text())
                self.data["steps"] = {**self.data["steps"], **on_disk.get("steps", {})}
            self.data["steps"][step] = {"finished": round(time.time(), 3), **_jsonable(info)}
            write_json(self.path, self.data)

    def forget(self, step: str) -> None:
        self.data["steps"].pop(step, None)
        if not is_main_process():
            return
        write_json(self.path, self.data)


# ------------------------------------------------------------------- atomic writes
def write_json(path: str | Path, data: Any) -> None:
    if not is_main_process():  # in a multi-process training run the main process writes the files
        return
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(_jsonable(data), indent=2, ensure_ascii=False), encoding="utf-8")


def write_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> None:
    if not is_main_process():
        return
    with atomic_path(path) as tmp:
        with tmp.open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(_jsonable(r), ensure_ascii=False) + "\n")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling path; on success rename it over `path` (file or folder), else delete it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    tmp.unlink()
    try:
        yield tmp
        if path.is_dir() and tmp.is_dir():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def make_trainer_callback(log: ProgressLog, step: str, total: int | None = None) -> Any:
    """A transformers TrainerCallback mirroring the trainer's logs into progress.jsonl."""
    from transformers import TrainerCallback

    class _ProgressCallback(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
            if logs:
                log.event(step, "metrics", done=state.global_step, total=total or state.max_steps, metrics=logs)

    return _ProgressCallback()


def skip_finished(progress: ProgressLog, manifest: Manifest, step: str, redo: bool, tag: str) -> bool:
    """True (and the skip recorded) when `step` finished in an earlier invocation and is not to be redone:
    the resume rule shared by both training stages."""
    if not manifest.done(step) or redo:
        return False
    progress.event(step, "skipped", message="finished earlier (use --redo to run it again)")
    print(f"[{tag}] {step}: already done, skipped")
    return True


def run_timed_step(progress: ProgressLog, step: str, func: Callable[[], dict[str, Any]], tag: str) -> dict[str, Any]:
    """Run one pipeline step between 'started' and its metrics (with `seconds`); a failure is recorded as
    'failed' in progress.jsonl (so the Train tab shows it) and re-raised."""
    import logging
    import traceback

    from mascot.errors import ConfigError

    progress.event(step, "started")
    print(f"[{tag}] {step}: started")
    t0 = time.time()
    try:
        metrics = func()
    except BaseException as exc:
        progress.event(step, "failed", message=f"{type(exc).__name__}: {exc}"[:2000])
        if not isinstance(exc, (ConfigError, KeyboardInterrupt)):
            logging.getLogger(__name__).debug(traceback.format_exc())
        raise
    metrics["seconds"] = round(time.time() - t0, 1)
    return metrics
