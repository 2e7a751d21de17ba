"""Shared helpers for the annotation tests: a temp store (SQLite, or PostgreSQL under the `annotation_db` fixture's
postgresql parameter), a controllable clock, pairs files."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from annotation.importing import import_pairs
from annotation.schemas import StudyConfig
from annotation.store import StudyStore

SYSTEMS = ("MASCOT", "Few-Shot CoT")


class FakeClock:
    """A clock the test moves by hand (hold expiry, timing flags)."""

    def __init__(self, start: datetime = datetime(2025, 1, 1, 12, 0, 0)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def pair_line(
    item_id: str,
    a: str = SYSTEMS[0],
    b: str = SYSTEMS[1],
    *,
    check: str | None = None,
    text_a: str | None = None,
    text_b: str | None = None,
) -> dict:
    """One pairs-file object; dialogues carry side-specific text so tests can tell sides apart."""
    line = {
        "id": item_id,
        "context": f"Seeker feels anxious about exams ({item_id}).",
        "a": {
            "system": a,
            "dialogue": [
                {"speaker": "User", "text": f"help {item_id}"},
                {"speaker": "Listener", "text": text_a or f"side-a reply {item_id}"},
            ],
        },
        "b": {
            "system": b,
            "dialogue": [
                {"speaker": "User", "text": f"help {item_id}"},
                {"speaker": "Assistant", "text": text_b or f"side-b reply {item_id}"},
            ],
        },
    }
    if check is not None:
        line.update(attention_check=True, expected=check)
    return line


def write_jsonl(path: Path, rows: Sequence[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# the PostgreSQL cluster the current test stores live on (set by the `annotation_db` fixture), else SQLite files
DATABASE: dict[str, Any] = {"cluster": None}


def store_url(tmp_path: Path, name: str = "annotation.db") -> str:
    """The URL of a test's store `name`: a SQLite file in `tmp_path`, or a database of the PostgreSQL cluster."""
    cluster = DATABASE["cluster"]
    return cluster.url_for(str(tmp_path / name)) if cluster is not None else f"sqlite:///{tmp_path / name}"


def make_store(tmp_path: Path, clock: FakeClock | None = None, name: str = "annotation.db") -> StudyStore:
    url = store_url(tmp_path, name)
    return StudyStore(url, clock=clock) if clock else StudyStore(url)


def seed_study(
    store: StudyStore,
    tmp_path: Path,
    *,
    study_id: str = "s1",
    n_items: int = 4,
    checks: int = 0,
    **config: object,
) -> list[str]:
    """Create a study with `n_items` ordinary pairs (+ `checks` attention items expecting 'a')."""
    store.create_study(config=StudyConfig(id=study_id, **config))  # type: ignore[arg-type]
    rows = [pair_line(f"i{n}") for n in range(n_items)]
    rows += [pair_line(f"check{n}", check="a", text_a="Please pick this response.") for n in range(checks)]
    import_pairs(store, study_id=study_id, path=write_jsonl(tmp_path / f"{study_id}-pairs.jsonl", rows))
    return [r["id"] for r in rows]
