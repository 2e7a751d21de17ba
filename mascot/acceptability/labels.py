"""Labelled replies: from the sampler's files and the labellers' files to the annotation store, and from the
store's export to the rows the scorer is trained and validated on.

The annotation store carries the labels (`python -m annotation import-replies`, `import-reply-labels`,
`export-reply-labels`); `to_store_files` writes its two import files and `load_labelled` reads its export.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mascot.errors import ConfigError
from mascot.group.dialogue import Dialogue, Turn

LABELS = ("not_acceptable", "borderline", "acceptable")  # the scorer's classes, worst first
META_FIELDS = ("scenario", "emotion", "valence", "situation", "temperature", "seed", "stem")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise ConfigError(f"{path} does not exist.")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{n} is not JSON ({exc.msg}).") from None
    return rows


def to_store_files(replies: Sequence[Path], labels: Sequence[Path], out_dir: Path) -> dict[str, int]:
    """The annotation store's import files for sampled replies and their labels: `items.jsonl` (the reply with
    its conversation; the source as `system`, the opening's details in `meta`) and `labels.jsonl` (labels of the
    items there; every label must name a sampled reply)."""
    items = {}
    for path in replies:
        for r in read_jsonl(path):
            items[r["id"]] = {"id": r["id"], "context": r["context"], "persona": r["persona"],
                              "persona_role": r["persona_role"], "reply": r["reply"],
                              "system": f"{r['system']}@{r['temperature']:g}",
                              "meta": {k: r[k] for k in META_FIELDS if k in r}}
    rows = [x for path in labels for x in read_jsonl(path)]
    unknown = [x["id"] for x in rows if x.get("id") not in items]
    if unknown:
        raise ConfigError(f"{len(unknown)} label(s) name no sampled reply (first: {unknown[0]}): pass the replies.jsonl "
                          "files the labelling batches were cut from.")
    labelled = {x["id"] for x in rows}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "items.jsonl").write_text("".join(json.dumps(items[i], ensure_ascii=False) + "\n"
                                                 for i in items if i in labelled), encoding="utf-8")
    (out_dir / "labels.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in rows),
                                          encoding="utf-8")
    return {"items": len(labelled), "labels": len(rows), "unlabelled": len(items) - len(labelled)}


@dataclass
class Labelled:
    """One label of one reply, as the annotation store exports it."""

    record: dict[str, Any]

    @property
    def meta(self) -> dict[str, Any]:
        m = self.record.get("meta") or {}
        return json.loads(m) if isinstance(m, str) else m

    @property
    def dialogue(self) -> Dialogue:
        ctx = self.record["context"]
        ctx = json.loads(ctx) if isinstance(ctx, str) else ctx
        return Dialogue([Turn(t["speaker"], t["text"]) for t in ctx], self.meta.get("situation", ""),
                        self.meta.get("emotion", ""))

    @property
    def scenario(self) -> str:
        return str(self.meta.get("scenario") or self.dialogue.last_user_text())

    @property
    def label(self) -> int:
        return LABELS.index(self.record["acceptability"])

    @property
    def fits(self) -> int:
        return int(self.record.get("persona_fit") == "fits")


def load_labelled(path: Path) -> list[Labelled]:
    """The rows of an `export-reply-labels --format jsonl` file (one per label)."""
    rows = [Labelled(r) for r in read_jsonl(path)]
    bad = [r.record.get("id") for r in rows if r.record.get("acceptability") not in LABELS]
    if bad:
        raise ConfigError(f"{path}: {len(bad)} rows without a valid acceptability label (first: {bad[0]}); "
                          f"valid labels: {', '.join(LABELS)}.")
    if not rows:
        raise ConfigError(f"{path} holds no labels.")
    return rows
