"""Scenario data for training and evaluation: loaders for Empathetic Dialogues, ESConv and QMSum in
their original formats, and a bundled set written for this project (`mascot/data/bundled/`).

    >>> from mascot.data import load_scenarios
    >>> test = load_scenarios("bundled-test")                 # bundled held-out split
    >>> ed = load_scenarios("empathetic_dialogues:/data/empatheticdialogues", split="train")
    >>> qm = load_scenarios("/data/QMSum/data/ALL/jsonl")       # format detected from the files
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mascot.data.formats import (
    ED_COLUMNS,
    ED_SOURCE,
    ESCONV_SOURCE,
    QMSUM_SOURCE,
    DatasetError,
    load_empathetic_dialogues,
    load_esconv,
    load_qmsum,
)
from mascot.data.scenario import ED_EMOTIONS, SPLITS, VALENCES, Scenario, valence_of

BUNDLED_DIR = Path(__file__).parent / "bundled"
BUNDLED_PARTS = {
    "ed": ("empathetic_dialogues", BUNDLED_DIR / "empatheticdialogues"),
    "qmsum": ("qmsum", BUNDLED_DIR / "qmsum"),
    "esconv": ("esconv", BUNDLED_DIR / "esconv" / "ESConv.json"),
}

# A loader reads one dataset from a local path: (path, split) -> scenarios.
Loader = Callable[..., list[Scenario]]


def load_bundled(path: str | Path | None = None, split: str | None = None) -> list[Scenario]:
    """The bundled set: Empathetic-Dialogues-format openings, QMSum-format meetings and the
    ESConv-format out-of-domain dialogues. `path` may name one part: ed, qmsum or esconv."""
    parts = [str(path)] if path else list(BUNDLED_PARTS)
    out: list[Scenario] = []
    for part in parts:
        if part not in BUNDLED_PARTS:
            raise DatasetError(f"Unknown bundled part {part!r}. Valid parts: {', '.join(BUNDLED_PARTS)}.")
        loader, where = BUNDLED_PARTS[part]
        out += LOADERS[loader](where, split=split)
    return out


LOADERS: dict[str, Loader] = {
    "empathetic_dialogues": load_empathetic_dialogues,
    "esconv": load_esconv,
    "qmsum": load_qmsum,
    "bundled": load_bundled,
}
_SOURCES = {"empathetic_dialogues": ED_SOURCE, "esconv": ESCONV_SOURCE, "qmsum": QMSUM_SOURCE}


def detect_format(path: Path) -> str:
    """The loader name for a local path, from its extension or (folders) the files inside."""
    if not path.exists():
        raise DatasetError(
            f"{path} does not exist. Pass a dataset file or folder, or a loader name: {', '.join(LOADERS)} "
            "(e.g. `bundled-test`, `empathetic_dialogues:/path/to/empatheticdialogues`)."
        )
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    suffixes = {p.suffix.lower() for p in files}
    for suffix, name in ((".csv", "empathetic_dialogues"), (".jsonl", "qmsum"), (".json", "esconv")):
        if suffix in suffixes:
            return name
    raise DatasetError(
        f"{path}: cannot tell the dataset format (no .csv, .jsonl or .json file). Expected an Empathetic "
        f"Dialogues CSV ({ED_SOURCE}), an ESConv JSON ({ESCONV_SOURCE}) or a QMSum JSONL ({QMSUM_SOURCE})."
    )


def load_scenarios(name_or_path: str | Path, split: str | None = None) -> list[Scenario]:
    """Load scenarios by loader name, `NAME:PATH`, `NAME-train|test`, or a plain path.

    Args:
        name_or_path: `bundled`, `bundled-test`, `bundled:ed`, `qmsum:/data/QMSum/data/ALL/jsonl`,
            or a file/folder whose format is detected.
        split: keep only `train` or `test` scenarios (None keeps both).
    Returns:
        Scenarios in file order (deterministic).
    """
    if split is not None and split not in SPLITS:
        raise DatasetError(f"Unknown split {split!r}. Valid splits: {', '.join(SPLITS)}.")
    spec = str(name_or_path)
    for s in SPLITS:
        if spec.endswith(f"-{s}") and spec[: -len(s) - 1].split(":")[0] in LOADERS:
            if split is not None and split != s:
                raise DatasetError(f"{spec!r} selects the {s} split but split={split!r} was also asked for.")
            spec, split = spec[: -len(s) - 1], s
    name, _, path = spec.partition(":")
    if name in LOADERS:
        if not path and name != "bundled":
            raise DatasetError(
                f"The {name} loader needs a local path: `{name}:/path/to/data`. Get the dataset from "
                f"{_SOURCES[name]}; nothing is downloaded at run time."
            )
        return LOADERS[name](path or None, split=split) if name == "bundled" else LOADERS[name](Path(path), split=split)
    if not Path(spec).exists() and "/" not in spec and "." not in spec:
        raise DatasetError(f"Unknown scenario loader {spec!r}. Valid loaders: {', '.join(LOADERS)}; or pass a path.")
    p = Path(spec)
    return LOADERS[detect_format(p)](p, split=split)


__all__ = [
    "BUNDLED_DIR", "ED_COLUMNS", "ED_EMOTIONS", "LOADERS", "SPLITS", "VALENCES", "DatasetError", "Scenario",
    "detect_format", "load_bundled", "load_empathetic_dialogues", "load_esconv", "load_qmsum", "load_scenarios",
    "valence_of",
]
