"""Default locations shared by the app, the annotation CLI and the trainers (stdlib only).

Kept at the bottom layer so that `annotation/` and `app/` read the same defaults without either
importing the other: the data folder (`MASCOT_DATA_DIR`, else `./data`) and the annotation database
(`MASCOT_ANNOTATION_DB_URL`, else `sqlite:///<data_dir>/annotation.db`).
"""

from __future__ import annotations

import os
from pathlib import Path


def default_data_dir() -> str:
    """`MASCOT_DATA_DIR`, else `data/` under the current working directory."""
    return os.environ.get("MASCOT_DATA_DIR") or str(Path.cwd() / "data")


def annotation_db_url(data_dir: str | Path | None = None) -> str:
    """`MASCOT_ANNOTATION_DB_URL`, else the SQLite file `annotation.db` inside `data_dir`."""
    explicit = os.environ.get("MASCOT_ANNOTATION_DB_URL")
    if explicit:
        return explicit
    return f"sqlite:///{Path(data_dir or default_data_dir()) / 'annotation.db'}"


def sqlite_url_for(data_dir: str | Path) -> str:
    """The SQLite URL of the annotation database inside `data_dir` (ignores the environment)."""
    return f"sqlite:///{Path(data_dir) / 'annotation.db'}"
