"""The crisis detector's test-only sets (docs/safety.md, "Data"): held-out sets written by blind writers and
committed before any model, rule or threshold read them, the category checks, and the check that keeps training
lines away from all of them. No training, cross-validation or threshold choice reads these files."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path

from rapidfuzz import fuzz, process

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
    """Texts of `examples` within a difflib similarity of `cutoff` of a held-out line.

    The result is exactly `difflib.get_close_matches(text, held, cutoff=cutoff)`'s: rapidfuzz's Indel ratio
    (2 * longest common subsequence / total length) bounds difflib's ratio from above, since difflib's matching
    blocks are one common subsequence, so only pairs over the bound reach difflib."""
    texts = [e.text for e in examples]
    if not texts:
        return []
    held = [comparable(e.text) for e in held_out_messages()]
    words = [comparable(t) for t in texts]
    bound = process.cdist(words, held, scorer=fuzz.ratio, score_cutoff=100 * cutoff - 1e-6, workers=-1)
    matcher = difflib.SequenceMatcher()
    near = []
    for i, word in enumerate(words):
        matcher.set_seq2(word)  # get_close_matches' orientation: the query is seq2, each candidate seq1
        for j in bound[i].nonzero()[0]:
            matcher.set_seq1(held[j])
            if matcher.ratio() >= cutoff:
                near.append(texts[i])
                break
    return near
