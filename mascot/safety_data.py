"""The labelled data behind the crisis detector, shipped in `mascot/data/safety/`:

- `crisis_messages.txt`: user messages, `crisis` (positive) or `negative` (hard negative), each with a
  category; written for this project.
- `persona_replies.txt`: persona replies, `bad` (encourages self-harm or gives means) or `good`.
- `context_cases.txt`: short multi-turn cases with the expected tier of the last message.
- `crisis_train_extra.txt`: more training messages (round 2), all training-only.
- `crisis_train_extra3.txt`: round-3 training messages aimed at the weakest categories, all training-only.
- `crisis_heldout_v2.txt`: the second held-out set (v2), written after the first model was developed and
  committed before any model saw it. It measured the round-2 model once (docs/safety.md) and was then
  retired into the training pool of round 3.
- `crisis_heldout_v3.txt`: the fresh held-out set (v3) of round 3, committed before any model saw it;
  every line is test-only.
- `crisis_heldout_v4.txt`: the fresh held-out set (v4) of round 4, written by a writer who saw none of the
  other files and committed before any model saw it; every line is test-only.
- `crisis_heldout_v5.txt`: the fresh held-out set (v5), written after round 4 by two writers who saw none of the
  project's files, with every line near (difflib >= 0.75) a training or older held-out line removed, and
  committed before the shipped model read it; every line is test-only.
- `crisis_train_extra4.txt`: round-4 training messages (everyday frustrations, everyday distress, mundane
  plans and goodbyes, short chat lines; relapse-framed crisis lines and short despair), written after chat
  probes found ordinary complaints read as a crisis; training-only.
- `crisis_train_excluded.txt`: training lines left out because they come within a difflib similarity of
  0.75 of a held-out line (v1, v3, v4 or v5); `near_held_out` finds them and a test keeps the list complete.

The held-out split is fixed per line by a hash of its text, so the training code can never see
it and editing one line never moves the others between splits.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
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
HELDOUT_V3 = "crisis_heldout_v3.txt"
HELDOUT_V4 = "crisis_heldout_v4.txt"
HELDOUT_V5 = "crisis_heldout_v5.txt"
HELDOUT_ML = "crisis_heldout_ml.txt"
HELDOUT_ML2 = "crisis_heldout_ml2.txt"
DEV_ML = "crisis_dev_ml.txt"
TRAIN_EXTRA = "crisis_train_extra.txt"
TRAIN_EXTRA3 = "crisis_train_extra3.txt"
TRAIN_EXTRA4 = "crisis_train_extra4.txt"
TRAIN_EXCLUDED = "crisis_train_excluded.txt"
NEAR_CUTOFF = 0.75  # difflib ratio at which a training line counts as a paraphrase of a held-out line


def _training_only(path: Path) -> list[Example]:
    """Every message of a block file, all in the training split."""
    return [Example(text, label, cat, "train", label == MESSAGE_LABELS[0]) for label, cat, text in _blocks(path, MESSAGE_LABELS)]


def _test_only(path: Path) -> list[Example]:
    """Every message of a held-out block file, all in the test split; a repeated line is refused."""
    rows = _blocks(path, MESSAGE_LABELS)
    texts = [t for _, _, t in rows]
    if len(set(texts)) != len(texts):
        raise ConfigError(f"{path}: a line appears twice; each held-out message must be unique.")
    return [Example(text, label, cat, "test", label == MESSAGE_LABELS[0]) for label, cat, text in rows]


def load_train_extra(path: Path | None = None) -> list[Example]:
    """The round-2 training messages: all training-only (a test checks they overlap no held-out line)."""
    return _training_only(path or DATA_DIR / TRAIN_EXTRA)


def load_train_extra3() -> list[Example]:
    """The round-3 training messages (farewells, plans, self-harm, passive ideation, lethal questions, means,
    and the hard negatives that resemble them): all training-only."""
    return _training_only(DATA_DIR / TRAIN_EXTRA3)


def load_train_extra4() -> list[Example]:
    """The round-4 training messages: negatives (everyday frustrations such as a scraped car with "no note",
    everyday distress, mundane plans and goodbyes, short chat lines, figurative "killing myself") and crisis lines
    (relapse-framed ideation, short despair); all training-only."""
    return _training_only(DATA_DIR / TRAIN_EXTRA4)


def load_retired_v2() -> list[Example]:
    """The v2 held-out lines as round-3 training lines: v2 measured the round-2 model once and was retired."""
    return _training_only(DATA_DIR / HELDOUT_V2)


def load_excluded() -> set[str]:
    """Training lines left out as near-paraphrases of held-out lines (one per line, `#` comments)."""
    path = DATA_DIR / TRAIN_EXCLUDED
    if not path.exists():
        return set()
    return {ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.startswith("#")}


def _comparable(text: str) -> str:
    """Lowercase, punctuation dropped, spaces collapsed: the form near-duplicates are compared in (not
    `safety_patterns.normalise`, which keeps punctuation for the patterns)."""
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s]", "", text.lower())).strip()


def held_out_messages() -> list[Example]:
    """Every message no model may train on: the v1 hash split of crisis_messages.txt and the v3, v4, v5 and
    multilingual (ml1, ml2) sets."""
    return ([e for e in load_messages() if e.split == "test"] + load_heldout_v3() + load_heldout_v4() + load_heldout_v5()
            + load_heldout_ml() + load_heldout_ml2())


def near_held_out(examples: Iterable[Example], cutoff: float = NEAR_CUTOFF) -> list[str]:
    """Texts of `examples` within a difflib similarity of `cutoff` of a held-out line (slow: seconds per hundred)."""
    import difflib

    held = [_comparable(e.text) for e in held_out_messages()]
    return [e.text for e in examples if difflib.get_close_matches(_comparable(e.text), held, n=1, cutoff=cutoff)]


def load_heldout_v2(path: Path | None = None) -> list[Example]:
    """The held-out messages of round 2 (v2): test-only for the models that predate round 3."""
    return _test_only(path or DATA_DIR / HELDOUT_V2)


def load_heldout_v3(path: Path | None = None) -> list[Example]:
    """The fresh held-out messages of round 3 (v3): all test-only, never used for training or threshold choice."""
    return _test_only(path or DATA_DIR / HELDOUT_V3)


def load_heldout_v4(path: Path | None = None) -> list[Example]:
    """The fresh held-out messages of round 4 (v4): all test-only, never used for training or threshold choice."""
    return _test_only(path or DATA_DIR / HELDOUT_V4)


def load_heldout_v5(path: Path | None = None) -> list[Example]:
    """The fresh held-out messages written after round 4 (v5), read by the shipped model only: all test-only,
    never used for training or threshold choice."""
    return _test_only(path or DATA_DIR / HELDOUT_V5)


def load_heldout_ml(path: Path | None = None) -> list[Example]:
    """The multilingual held-out messages (ml1: 16 languages, the language as the category), written before the
    multilingual patterns were read against them: all test-only. Categories read `<language>/<label>`, since
    each language has both labels."""
    return _by_language(_test_only(path or DATA_DIR / HELDOUT_ML))


def load_heldout_ml2(path: Path | None = None) -> list[Example]:
    """The second multilingual held-out set (ml2: the same 16 languages, another blind writer), written after the
    multilingual patterns and the language gate shipped, to confirm ml1's figures: all test-only. Categories read
    `<language>/<label>`."""
    return _by_language(_test_only(path or DATA_DIR / HELDOUT_ML2))


def load_dev_ml(path: Path | None = None) -> list[Example]:
    """The multilingual development set (mldev, a second writer): what the multilingual patterns were written
    against; free to read, never a held-out figure. Categories read `<language>/<label>`."""
    return _by_language(_training_only(path or DATA_DIR / DEV_ML))


def _by_language(rows: list[Example]) -> list[Example]:
    """A multilingual file's examples with categories `<language>/<label>` (each language has both labels)."""
    return [replace(e, category=f"{e.category}/{e.label}") for e in rows]


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


def message_training_examples(untrained: Iterable[str] = (), extra: bool = True, round3: bool = True,
                              round4: bool = True, round5: bool = False) -> list[Example]:
    """The message classifier's training examples, in training order: the training split of the labelled
    messages, of the everyday scenario openings and of the meeting openings, then (with `extra`) the round-2
    training messages, then (with `round3`) the round-3 training messages and the retired v2 set, then (with
    `round4`) the round-4 training messages, then (with `round5`, off by default: tried in stop 21 and not
    shipped, docs/safety.md) the multilingual development set; minus the
    categories in `untrained` (those a saved model predates) and the lines excluded as near-paraphrases of
    held-out lines."""
    skip = set(untrained)
    pool = load_messages() + load_ordinary() + load_meeting_openings() + (load_train_extra() if extra else [])
    if round3:
        pool += load_train_extra3() + load_retired_v2()
    if round4:
        pool += load_train_extra4()
    if round5:
        pool += load_dev_ml()
    excluded = load_excluded()
    seen: set[str] = set()
    out = []
    for e in pool:
        if e.split == "train" and e.category not in skip and e.text not in excluded and e.text not in seen:
            seen.add(e.text)
            out.append(e)
    return out


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
