"""The safety event log: one SQLite row per crisis-check decision (input) and per output check,
holding the tier, the score and the layer that decided, and never the message text.

The log is passed in, never found: a detector records into the `SafetyLog` it was built with
(`CrisisDetector(events=SafetyLog(settings.safety_log))`) and records nothing without one. The app gives the
chat's detector and its Safety tab the same file; `tier_counts` and `layer_counts` are what the tab shows.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

INPUT = "input"
OUTPUT = "output"
LOG_FILE = "safety_events.sqlite"


def default_log_path(data_dir: str | Path) -> Path:
    """Where the safety log lives in the data folder `data_dir`."""
    return Path(data_dir) / LOG_FILE


class SafetyLog:
    """Append-only SQLite store of safety decisions (thread-safe; one connection per log)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=10)
            with self._db:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS safety_events (id INTEGER PRIMARY KEY, created REAL NOT NULL, "
                    "session TEXT NOT NULL, kind TEXT NOT NULL, tier TEXT NOT NULL, score REAL NOT NULL, layer TEXT NOT NULL)"
                )
        return self._db

    def record(self, kind: str, tier: str, score: float, layer: str, session: str = "") -> None:
        """Store one decision. A failure to write is logged, never raised: the chat must go on."""
        try:
            with self._lock:
                db = self._conn()
                with db:
                    db.execute("INSERT INTO safety_events (created, session, kind, tier, score, layer) VALUES (?, ?, ?, ?, ?, ?)",
                               (time.time(), session[:64], kind, tier, float(score), layer))
        except (sqlite3.Error, OSError) as exc:
            log.error("could not write the safety log %s: %s", self.path, exc)

    def tier_counts(self, kind: str = INPUT, since: float | None = None) -> dict[str, int]:
        """Number of decisions per tier (for `kind`), optionally since a UNIX time."""
        if not self.path.exists():
            return {}
        with self._lock:
            rows = self._conn().execute(
                "SELECT tier, COUNT(*) FROM safety_events WHERE kind = ? AND created >= ? GROUP BY tier ORDER BY tier",
                (kind, since or 0.0),
            ).fetchall()
        return {str(t): int(n) for t, n in rows}

    def layer_counts(self, kind: str = INPUT) -> dict[tuple[str, str], int]:
        """Number of decisions per (tier, layer)."""
        if not self.path.exists():
            return {}
        with self._lock:
            rows = self._conn().execute(
                "SELECT tier, layer, COUNT(*) FROM safety_events WHERE kind = ? GROUP BY tier, layer", (kind,)).fetchall()
        return {(str(t), str(layer)): int(n) for t, layer, n in rows}

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
