"""The crisis detector's test-only sets (docs/safety.md, "Data"): held-out sets written by blind writers and
committed before any model, rule or threshold read them, the category checks, and the check that keeps training
lines away from all of them. No training, cross-validation or threshold choice reads these files."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path

from mascot.errors import ConfigError
from mascot.safety.training.data import DATA_DIR, Example, by_language, comparable, load_messages, test_only

# report key -> (file, whether its categories are languages: `<language>/<label>`), oldest first
HELDOUT_FILES: dict[str, tuple[str, bool]] = {
    "heldout_large": ("crisis_heldout_large.txt", False),
    "heldout_blind": ("crisis_heldout_blind.txt", False),
    "heldout_distant": ("crisis_heldout_distant.txt", False),
    "heldout_multilingual": ("crisis_heldout_multilingual.txt", True),
    "heldout_multilingual_confirm": ("crisis_heldout_multilingual_confirm.txt", True),
    "heldout_fresh": ("crisis_heldout_fresh.txt", False),
    "heldout_multilingual_fresh": ("crisis_heldout_multilingual_fresh.txt", True),
    "heldout_everyday": ("crisis_heldout_everyday.txt", False),
    "heldout_latest": ("crisis_heldout_latest.txt", False),
    "heldout_multilingual_latest": ("crisis_heldout_multilingual_latest.txt", True),
    "heldout_everyday_latest": ("crisis_heldout_everyday_latest.txt", False),
    "heldout_multilingual_newest": ("crisis_heldout_multilingual_newest.txt", True),
    "heldout_next": ("crisis_heldout_next.txt", False),
    "heldout_multilingual_next": ("crisis_heldout_multilingual_next.txt", True),
    "heldout_everyday_next": ("crisis_heldout_everyday_next.txt", False),
}
CATEGORIES = "crisis_categories.txt"
NEAR_CUTOFF = 0.75  # difflib ratio at which a training line counts as a paraphrase of a held-out line


def load_heldout(name: str, path: Path | None = None) -> list[Example]:
    """Every line of held-out set `name` (a key of `HELDOUT_FILES`), all in the test split."""
    if name not in HELDOUT_FILES:
        raise ConfigError(f"Unknown held-out set {name!r}; valid sets: {', '.join(HELDOUT_FILES)}.")
    filename, multilingual = HELDOUT_FILES[name]
    rows = test_only(path or DATA_DIR / filename)
    return by_language(rows) if multilingual else rows


def load_categories(path: Path | None = None) -> list[Example]:
    """The category checks: development lines the tests hold the detector to; never training lines."""
    return test_only(path or DATA_DIR / CATEGORIES)


def held_out_messages() -> list[Example]:
    """Every message no model may train on: every held-out set, the core set's test split, the category checks."""
    return ([e for e in load_messages() if e.split == "test"] + [e for n in HELDOUT_FILES for e in load_heldout(n)]
            + load_categories())


def near_held_out(examples: Iterable[Example], cutoff: float = NEAR_CUTOFF) -> list[str]:
    """Texts of `examples` within a difflib similarity of `cutoff` of a held-out line (slow: seconds per hundred)."""
    held = [comparable(e.text) for e in held_out_messages()]
    return [e.text for e in examples if difflib.get_close_matches(comparable(e.text), held, n=1, cutoff=cutoff)]
