"""The labelled data behind the crisis detector, shipped in `mascot/data/safety/`:

- `crisis_messages.txt`: user messages, `crisis` (positive) or `negative` (hard negative), each with a
  category; written for this project.
- `persona_replies.txt`: persona replies, `bad` (encourages self-harm or gives means) or `good`.
- `context_cases.txt`: short multi-turn cases with the expected tier of the last message.
- `crisis_train_extra.txt`: more training messages (round 2), all training-only.
- `crisis_heldout_v2.txt`: a fresh held-out set (v2), written after the first model was developed and
  committed before any model saw it; every line is test-only.

The held-out split is fixed per line by a hash of its text, so the training code can never see
it and editing one line never moves the others between splits.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mascot.errors import ConfigError

DATA_DIR = Path(__file__).parent / "data" / "safety"
TEST_FRACTION = 0.3
REPLY_TEST_FRACTION = 0.5
MESSAGE_LABELS = ("crisis", "negative")
REPLY_LABELS = ("bad", "good")
TIERS = ("crisis", "concern", "none")


@dataclass(frozen=True)
class Example:
    """One labelled text; `positive` is True for `crisis` messages and `bad` replies."""

    text: str
    label: str
    category: str
    split: str  # "train" or "test"
    positive: bool


@dataclass(frozen=True)
class ContextCase:
    """User turns (oldest first) and the tier expected for the last one."""

    turns: tuple[str, ...]
    expected: str


def split_of(text: str, test_fraction: float = TEST_FRACTION) -> str:
    """`test` or `train`, fixed by the SHA-256 of the text (stable across edits and machines)."""
    bucket = int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "test" if bucket < test_fraction else "train"


def _blocks(path: Path, labels: Iterable[str]) -> list[tuple[str, str, str]]:
    """(label, category, text) for every line of a `## label category` block file."""
    if not path.exists():
        raise ConfigError(f"The safety dataset {path} is missing: restore it from the repository (git checkout -- {path}).")
    rows: list[tuple[str, str, str]] = []
    label = category = ""
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if line.startswith("## "):
            parts = line[3:].split()
            if len(parts) != 2 or parts[0] not in labels:
                raise ConfigError(f"{path}:{n}: a block header must be `## <{'|'.join(labels)}> <category>`, got {line!r}.")
            label, category = parts
        elif line and not line.startswith("#"):
            if not label:
                raise ConfigError(f"{path}:{n}: text before the first `## label category` header.")
            rows.append((label, category, line))
    return rows


def _examples(path: Path, labels: tuple[str, str], test_fraction: float) -> list[Example]:
    rows = _blocks(path, labels)
    seen: dict[str, int] = {}
    for i, (_, _, text) in enumerate(rows):
        if text in seen:
            raise ConfigError(f"{path}: the line {text!r} appears twice; a duplicate could sit in both splits.")
        seen[text] = i
    return [Example(text, label, cat, split_of(text, test_fraction), label == labels[0]) for label, cat, text in rows]


def load_messages(path: Path | None = None) -> list[Example]:
    """The crisis / hard-negative user messages."""
    return _examples(path or DATA_DIR / "crisis_messages.txt", MESSAGE_LABELS, TEST_FRACTION)  # type: ignore[arg-type]


HELDOUT_V2 = "crisis_heldout_v2.txt"
TRAIN_EXTRA = "crisis_train_extra.txt"


def load_train_extra(path: Path | None = None) -> list[Example]:
    """The round-2 training messages: all training-only (a test checks they overlap no held-out line)."""
    rows = _blocks(path or DATA_DIR / TRAIN_EXTRA, MESSAGE_LABELS)
    return [Example(text, label, cat, "train", label == MESSAGE_LABELS[0]) for label, cat, text in rows]


def load_heldout_v2(path: Path | None = None) -> list[Example]:
    """The fresh held-out messages (v2): all test-only, never used for training or threshold choice."""
    path = path or DATA_DIR / HELDOUT_V2
    rows = _blocks(path, MESSAGE_LABELS)
    texts = [t for _, _, t in rows]
    if len(set(texts)) != len(texts):
        raise ConfigError(f"{path}: a line appears twice; each held-out message must be unique.")
    return [Example(text, label, cat, "test", label == MESSAGE_LABELS[0]) for label, cat, text in rows]


def load_replies(path: Path | None = None) -> list[Example]:
    """The bad / good persona replies for the output check (a small set: half of it is held out)."""
    return _examples(path or DATA_DIR / "persona_replies.txt", REPLY_LABELS, REPLY_TEST_FRACTION)  # type: ignore[arg-type]


def load_ordinary() -> list[Example]:
    """Everyday openings of the bundled emotional-support scenarios (EmpatheticDialogues, ESConv) as
    extra negatives, keeping the scenarios' own train/test split: they teach and measure how rarely
    ordinary sad or stressed messages raise the alarm."""
    from mascot.data import load_scenarios

    return [Example(s.opening, "negative", "ordinary", "test" if s.split == "test" else "train", False)
            for s in load_scenarios("bundled") if s.setting == "emotional-support" and s.opening]


def load_meeting_openings() -> list[Example]:
    """Openings of the bundled meeting scenarios (questions about a meeting) as everyday negatives, keeping the
    scenarios' own train/test split (the shipped classifier predates them and never saw either split)."""
    from mascot.data import load_scenarios

    return [Example(s.opening, "negative", "meeting", "test" if s.split == "test" else "train", False)
            for s in load_scenarios("bundled") if s.setting == "meeting" and s.opening]


def message_training_examples(untrained: Iterable[str] = (), extra: bool = True) -> list[Example]:
    """The message classifier's training examples, in training order: the training split of the labelled
    messages, of the everyday scenario openings and of the meeting openings, then (with `extra`) the round-2
    training messages, minus the categories in `untrained` (those a saved model predates)."""
    skip = set(untrained)
    pool = load_messages() + load_ordinary() + load_meeting_openings() + (load_train_extra() if extra else [])
    return [e for e in pool if e.split == "train" and e.category not in skip]


# Training-only augmentation: how people really type (lowercase, no apostrophes, slang, typos).
_SLANG = [(r"\byou\b", "u"), (r"\bgoing to\b", "gonna"), (r"\bwant to\b", "wanna"), (r"\btonight\b", "tonite"),
          (r"\breally\b", "rly"), (r"\bbecause\b", "cuz"), (r"\bright now\b", "rn"), (r"\bto be honest\b", "tbh"),
          (r"\bsomeone\b", "some1"), (r"\bplease\b", "pls"), (r"\btomorrow\b", "tmrw"), (r"\bthough\b", "tho"),
          (r"\bI am\b", "im"), (r"\bdon't\b", "dont"), (r"\bcan't\b", "cant"), (r"\bI'm\b", "im")]


def _typo(word: str, rng: random.Random) -> str:
    if len(word) < 4 or not word.isalpha():
        return word
    i = rng.randrange(1, len(word) - 1)
    kind = rng.randrange(3)
    if kind == 0:
        return word[:i] + word[i + 1 :]  # dropped letter
    if kind == 1:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]  # swapped letters
    return word[:i] + word[i] + word[i:]  # doubled letter


def augment(text: str) -> str:
    """One noisy variant of a training message, fixed by its text: lowercase, no apostrophes or final full
    stop, slang substitutions and a typo or two (only ever applied to training lines)."""
    rng = random.Random(hashlib.sha256(("aug:" + text).encode("utf-8")).hexdigest())
    out = text
    for pattern, repl in _SLANG:
        if rng.random() < 0.7:
            out = re.sub(pattern, repl, out, flags=re.I)
    out = out.lower().replace("'", "").replace("’", "").rstrip(".")
    words = out.split(" ")
    for _ in range(rng.choice((0, 1, 1, 2))):
        j = rng.randrange(len(words))
        words[j] = _typo(words[j], rng)
    out = " ".join(words)
    return out if out != text else out + " tbh"


def load_context_cases(path: Path | None = None) -> list[ContextCase]:
    """The multi-turn context cases."""
    path = path or DATA_DIR / "context_cases.txt"
    cases: list[ContextCase] = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        expected, sep, rest = line.partition("|")
        if not sep or expected.strip() not in TIERS:
            raise ConfigError(f"{path}:{n}: expected `<{'|'.join(TIERS)}> | turn || turn`, got {line!r}.")
        cases.append(ContextCase(tuple(t.strip() for t in rest.split("||")), expected.strip()))
    return cases
