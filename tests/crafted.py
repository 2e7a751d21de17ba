"""A raw HTTP client for crafted requests against a live MASCOT server (no gradio_client: it would
refuse private events, and an attacker would not use it either), plus the tally the suite reports.

`GradioApp(base)` reads an app's `/config`, calls any event by index through the queue exactly as
the browser does (`/gradio_api/queue/join` + the `/gradio_api/queue/data` event stream) and uploads
files. `Tally` counts crafted requests tried and refused; `MASCOT_CRAFTED_REPORT=FILE` writes it out.
"""

from __future__ import annotations

import json
import os
import secrets
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

FILEDATA_META = {"_type": "gradio.FileData"}


def filedata(path: str | Path) -> dict[str, Any]:
    """The FileData shape Gradio copies into its cache when file checks are off."""
    return {"path": str(path), "url": None, "orig_name": Path(path).name, "meta": FILEDATA_META}


@dataclass
class Result:
    """What one event call returned: success, output data, error text, and the raw stream text."""

    status: int
    success: bool
    data: list[Any] | None
    error: str
    raw: str


@dataclass
class GradioApp:
    """One mounted Gradio app (`base` like http://127.0.0.1:PORT/annotate), optionally logged in."""

    base: str
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=30))
    session_hash: str = field(default_factory=lambda: secrets.token_hex(6))

    def login(self, user: str, password: str) -> httpx.Response:
        return self.client.post(f"{self.base}/login", data={"username": user, "password": password})

    def config(self) -> dict[str, Any]:
        r = self.client.get(f"{self.base}/config")
        r.raise_for_status()
        return r.json()

    def new_session(self) -> GradioApp:
        """The same app and cookies, a fresh page session (another browser tab)."""
        return GradioApp(self.base, self.client)

    def call(self, fn_index: int, data: list[Any], *, query: str = "", trigger_id: int | None = None) -> Result:
        """Join the queue with `data` for event `fn_index` and read its stream to the end."""
        body = {"data": data, "fn_index": fn_index, "session_hash": self.session_hash, "event_data": None,
                "trigger_id": trigger_id}
        r = self.client.post(f"{self.base}/gradio_api/queue/join{query}", json=body)
        if r.status_code != 200:
            return Result(r.status_code, False, None, r.text[:2000], r.text)
        lines: list[str] = []
        with self.client.stream("GET", f"{self.base}/gradio_api/queue/data",
                                params={"session_hash": self.session_hash}) as stream:
            for line in stream.iter_lines():
                lines.append(line)
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("msg") == "process_completed":
                    out = msg.get("output") or {}
                    ok = bool(msg.get("success"))
                    return Result(200, ok, out.get("data"), "" if ok else json.dumps(out)[:2000], "\n".join(lines))
                if msg.get("msg") in ("close_stream", "unexpected_error"):
                    break
        raw = "\n".join(lines)
        return Result(200, False, None, raw[:2000], raw)

    def upload(self, name: str, content: bytes) -> httpx.Response:
        return self.client.post(f"{self.base}/gradio_api/upload", files={"files": (name, content)})

    def fetch_file(self, path: str) -> httpx.Response:
        return self.client.get(f"{self.base}/gradio_api/file={path}")


def dependencies(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Events with a backend function: `{id, inputs, outputs, api_name, ...}` from /config."""
    return [d for d in config.get("dependencies", []) if d.get("backend_fn")]


def component_types(config: dict[str, Any]) -> dict[int, str]:
    return {c["id"]: c.get("type", "") for c in config.get("components", [])}


def served_paths(value: Any) -> list[str]:
    """Every `path` of a FileData-shaped object inside a returned value (what `file=` would serve)."""
    found: list[str] = []
    if isinstance(value, dict):
        if isinstance(value.get("path"), str):
            found.append(value["path"])
        for v in value.values():
            found += served_paths(v)
    elif isinstance(value, list):
        for v in value:
            found += served_paths(v)
    return found


class Tally:
    """Crafted requests tried and refused, per kind and per server mode (`mode`, set for each test by
    `tests/test_security_live.py`); tried and refused must stay equal (every attack refused)."""

    def __init__(self) -> None:
        self.mode = "in process"
        self.tried: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.mode_tried: Counter[str] = Counter()
        self.mode_refused: Counter[str] = Counter()

    def record(self, kind: str, refused: bool) -> bool:
        self.tried[kind] += 1
        self.refused[kind] += int(refused)
        self.mode_tried[self.mode] += 1
        self.mode_refused[self.mode] += int(refused)
        return refused

    def summary(self) -> dict[str, Any]:
        kinds = sorted(self.tried)
        return {"tried": sum(self.tried.values()), "refused": sum(self.refused.values()),
                "by_mode": {m: {"tried": self.mode_tried[m], "refused": self.mode_refused[m]} for m in sorted(self.mode_tried)},
                "by_kind": {k: {"tried": self.tried[k], "refused": self.refused[k]} for k in kinds}}

    def write(self) -> None:
        target = os.environ.get("MASCOT_CRAFTED_REPORT")
        if target:
            Path(target).write_text(json.dumps(self.summary(), indent=2) + "\n", encoding="utf-8")


TALLY = Tally()
