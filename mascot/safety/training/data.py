"""The labelled data behind the crisis detector, shipped in `mascot/data/safety/`; docs/safety.md ("Data") says
what each file holds, who wrote it and how it is used. Messages are `## <label> <category>` blocks (`crisis` or
`negative`, a hard negative). `crisis_messages.txt` is split 70/30 per line by a hash of its text. `crisis_train_*.txt`
and the retired sets (`crisis_heldout_retired*.txt`: held-out sets that measured a model, then joined training) are
training-only; every other `crisis_heldout_*.txt` is test-only, never read by training or threshold choice.
`crisis_categories.txt` holds development lines the tests check; `crisis_train_excluded.txt` lists training lines
left out as near-paraphrases of held-out lines (`near_held_out`)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from mascot.errors import ConfigError

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "safety"
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


RETIRED_HELDOUT = "crisis_heldout_retired.txt"
RETIRED_FRESH = "crisis_heldout_retired_fresh.txt"
RETIRED_MULTILINGUAL = "crisis_heldout_retired_multilingual.txt"
DEV_MULTILINGUAL = "crisis_dev_multilingual.txt"
TRAIN_CONFUSABLE = "crisis_train_confusable.txt"
TRAIN_FAREWELLS_PLANS = "crisis_train_farewells_plans.txt"
TRAIN_EVERYDAY = "crisis_train_everyday.txt"
TRAIN_EXCLUDED = "crisis_train_excluded.txt"
TRAIN_USE_ENGLISH = "crisis_train_use_english.txt"
TRAIN_MULTILINGUAL = "crisis_train_multilingual.txt"
TRAIN_GOOD_NEWS = "crisis_train_good_news.txt"
TRAIN_BLIND = "crisis_train_blind.txt"
# lines written or retired after the shipped USE head was trained: a head reads them only when asked (`--use-sets`)
RETIRED_LATER = "crisis_heldout_retired_later.txt"
RETIRED_MULTILINGUAL_LATER = "crisis_heldout_retired_multilingual_later.txt"
TRAIN_BLIND_LATER = "crisis_train_blind_later.txt"
TRAIN_MULTILINGUAL_LATER = "crisis_train_multilingual_later.txt"


def _training_only(path: Path) -> list[Example]:  # every message of a block file, all in the training split
    return [Example(text, label, cat, "train", label == MESSAGE_LABELS[0]) for label, cat, text in _blocks(path, MESSAGE_LABELS)]


def test_only(path: Path) -> list[Example]:
    """Every message of a held-out block file, all in the test split; a repeated line is refused."""
    rows = _blocks(path, MESSAGE_LABELS)
    texts = [t for _, _, t in rows]
    if len(set(texts)) != len(texts):
        raise ConfigError(f"{path}: a line appears twice; each held-out message must be unique.")
    return [Example(text, label, cat, "test", label == MESSAGE_LABELS[0]) for label, cat, text in rows]


def load_train_confusable(path: Path | None = None) -> list[Example]:
    """Training lines in the categories a classifier trained on the core set alone confused: all training-only
    (a test checks they overlap no held-out line)."""
    return _training_only(path or DATA_DIR / TRAIN_CONFUSABLE)


def load_train_farewells_plans() -> list[Example]:
    """Training lines of farewells, plans and timing, self-harm acts, passive ideation, lethal questions and means,
    the hard negatives that resemble them, and harmless plans and short despair: all training-only."""
    return _training_only(DATA_DIR / TRAIN_FAREWELLS_PLANS)


def load_train_everyday() -> list[Example]:
    """Training lines of everyday life (frustrations, distress, plans, short chat; relapse-framed ideation)."""
    return _training_only(DATA_DIR / TRAIN_EVERYDAY)


def load_train_good_news() -> list[Example]:  # good news about getting, finishing or planning things
    return _training_only(DATA_DIR / TRAIN_GOOD_NEWS)


def load_train_blind() -> list[Example]:  # three blind writers, the fresh sets' categories and look-alikes
    return _training_only(DATA_DIR / TRAIN_BLIND)


def load_train_blind_later() -> list[Example]:  # two more blind writers: weak categories, look-alikes, everyday openings
    return _training_only(DATA_DIR / TRAIN_BLIND_LATER)


def load_retired_later() -> list[Example]:  # English sets retired after the shipped USE head was trained
    return _training_only(DATA_DIR / RETIRED_LATER)


def load_train_use_english() -> list[Example]:
    """The USE head's own English lines (one blind writer); the MiniLM classifier never saw them (out of sample)."""
    return _training_only(DATA_DIR / TRAIN_USE_ENGLISH)


def load_train_multilingual() -> list[Example]:
    """The USE layer's multilingual training lines (16 languages, four native writers); categories `<language>/<label>`."""
    return by_language(_training_only(DATA_DIR / TRAIN_MULTILINGUAL))


def load_train_multilingual_later() -> list[Example]:  # Arabic, Persian, Turkish, Hindi, Thai; `<language>/<label>`
    return by_language(_training_only(DATA_DIR / TRAIN_MULTILINGUAL_LATER))


def load_retired_multilingual_later() -> list[Example]:  # multilingual sets retired after the shipped head was trained
    return by_language(_training_only(DATA_DIR / RETIRED_MULTILINGUAL_LATER))


def _retired(name: str, filename: str, split: str) -> list[Example]:
    """A retired held-out file: training lines (`split="train"`), or test lines for measuring a model that did not
    train on them (`split="test"`, every line unique)."""
    if split not in ("train", "test"):
        raise ConfigError(f"The {name}'s split must be 'train' or 'test', got {split!r}.")
    path = DATA_DIR / filename
    return _training_only(path) if split == "train" else test_only(path)


def load_retired_heldout(split: str = "train") -> list[Example]:
    """The retired held-out set: training lines of the shipped classifier, or test lines (`_retired`)."""
    return _retired("retired held-out set", RETIRED_HELDOUT, split)


def load_retired_fresh(split: str = "train") -> list[Example]:
    """Retired English sets of blind writers: training lines when asked for, or test lines (`_retired`)."""
    return _retired("retired fresh set", RETIRED_FRESH, split)


def load_retired_multilingual() -> list[Example]:
    """Retired multilingual sets (16 languages, blind writers): the USE head's training lines; `<language>/<label>`."""
    return by_language(_training_only(DATA_DIR / RETIRED_MULTILINGUAL))


def load_excluded() -> set[str]:
    """Training lines left out as near-paraphrases of held-out lines (one per line, `#` comments)."""
    path = DATA_DIR / TRAIN_EXCLUDED
    if not path.exists():
        return set()
    return {ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.startswith("#")}


def comparable(text: str) -> str:
    """Lowercase, punctuation dropped, spaces collapsed: the form near-duplicates are compared in (not
    `mascot.safety.patterns.normalise`, which keeps punctuation for the patterns)."""
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s]", "", text.lower())).strip()


def load_dev_multilingual(path: Path | None = None) -> list[Example]:
    """What the multilingual patterns were written against: free to read, never a held-out figure; `<language>/<label>`."""
    return by_language(_training_only(path or DATA_DIR / DEV_MULTILINGUAL))


def by_language(rows: list[Example]) -> list[Example]:
    """A multilingual file's examples with categories `<language>/<label>` (each language has both labels)."""
    return [replace(e, category=f"{e.category}/{e.label}") for e in rows]


def load_replies(path: Path | None = None) -> list[Example]:
    """The bad / good persona replies for the output check (a small set: half of it is held out)."""
    return _examples(path or DATA_DIR / "persona_replies.txt", REPLY_LABELS, REPLY_TEST_FRACTION)  # type: ignore[arg-type]


def load_ordinary() -> list[Example]:
    """The bundled emotional-support scenarios' openings as everyday negatives, in the scenarios' own split."""
    from mascot.data import load_scenarios

    return [Example(s.opening, "negative", "ordinary", "test" if s.split == "test" else "train", False)
            for s in load_scenarios("bundled") if s.setting == "emotional-support" and s.opening]


def load_meeting_openings() -> list[Example]:
    """The bundled meeting scenarios' openings as everyday negatives, in the scenarios' own split."""
    from mascot.data import load_scenarios

    return [Example(s.opening, "negative", "meeting", "test" if s.split == "test" else "train", False)
            for s in load_scenarios("bundled") if s.setting == "meeting" and s.opening]


@dataclass(frozen=True)
class TrainingSets:
    """Which training-only sets join the message classifier's base pool (the training splits of the labelled
    messages, the everyday scenario openings and the meeting openings). The defaults are the shipped model's;
    the multilingual development set is off: as training lines it cost English recall (docs/safety.md)."""

    confusable: bool = True
    farewells_plans: bool = True
    retired_heldout: bool = True
    everyday: bool = True
    retired_fresh: bool = True
    multilingual_dev: bool = False
    good_news: bool = False
    blind: bool = True
    retired_later: bool = True
    blind_later: bool = True

    @classmethod
    def of_model(cls, meta: dict) -> TrainingSets:
        """The sets a saved classifier was trained on, from its metadata (`training_sets`; none when absent)."""
        saved = meta.get("training_sets", {})
        return cls(**{f.name: bool(saved.get(f.name, False)) for f in fields(cls)})

    def as_dict(self) -> dict[str, bool]:
        return asdict(self)


def message_training_examples(untrained: Iterable[str] = (), sets: TrainingSets = TrainingSets()) -> list[Example]:
    """The message classifier's training examples, in training order: the base pool, then each set switched on
    in `sets` in the order of `TrainingSets`' fields; minus the categories in `untrained` (those a saved model
    was trained without) and the lines excluded as near-paraphrases of held-out lines."""
    skip = set(untrained)
    pool = load_messages() + load_ordinary() + load_meeting_openings()
    if sets.confusable:
        pool += load_train_confusable()
    if sets.farewells_plans:
        pool += load_train_farewells_plans()
    if sets.retired_heldout:
        pool += load_retired_heldout()
    if sets.everyday:
        pool += load_train_everyday()
    if sets.retired_fresh:
        pool += load_retired_fresh()
    if sets.multilingual_dev:
        pool += load_dev_multilingual()
    if sets.good_news:
        pool += load_train_good_news()
    if sets.blind:
        pool += load_train_blind()
    if sets.retired_later:
        pool += load_retired_later()
    if sets.blind_later:
        pool += load_train_blind_later()
    excluded = load_excluded()
    seen: set[str] = set()
    out = []
    for e in pool:
        if e.split == "train" and e.category not in skip and e.text not in excluded and e.text not in seen:
            seen.add(e.text)
            out.append(e)
    return out


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
