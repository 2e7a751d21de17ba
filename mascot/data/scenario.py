"""Scenarios: the conversation openings that training and evaluation put in front of the group.

A Scenario is dataset-neutral: an emotional-support opening from Empathetic Dialogues or ESConv,
or a meeting excerpt plus a query from QMSum. `to_dialogue()` turns it into the Dialogue the
chat engine continues, so rollouts, judges and the eval all see the same context.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from mascot.group.dialogue import USER, Dialogue, Turn

SETTINGS = ("emotional-support", "meeting")
SPLITS = ("train", "test")
VALENCES = ("positive", "negative", "neutral")

# paper.md §7.14: the 32 Empathetic Dialogues emotion labels by valence.
NEGATIVE_EMOTIONS = (
    "afraid", "angry", "annoyed", "anxious", "apprehensive", "ashamed", "devastated", "disappointed",
    "disgusted", "embarrassed", "furious", "guilty", "jealous", "lonely", "sad", "terrified",
)
POSITIVE_EMOTIONS = (
    "caring", "confident", "content", "excited", "faithful", "grateful", "hopeful", "impressed",
    "joyful", "proud", "trusting",
)
NEUTRAL_EMOTIONS = ("anticipating", "nostalgic", "prepared", "sentimental", "surprised")
ED_EMOTIONS = NEGATIVE_EMOTIONS + POSITIVE_EMOTIONS + NEUTRAL_EMOTIONS

# ESConv's emotion_type labels are all distress states (the dataset is about seeking support).
ESCONV_EMOTIONS = ("anxiety", "depression", "sadness", "anger", "fear", "shame", "disgust", "nervousness",
                   "pain", "jealousy", "guilt")

_VALENCE = {**{e: "negative" for e in NEGATIVE_EMOTIONS + ESCONV_EMOTIONS},
            **{e: "positive" for e in POSITIVE_EMOTIONS},
            **{e: "neutral" for e in NEUTRAL_EMOTIONS}}


def valence_of(emotion: str) -> str:
    """Valence of an ED (or ESConv) emotion label; "" for labels outside the mapping.

    >>> valence_of("proud"), valence_of("Lonely"), valence_of("nostalgic")
    ('positive', 'negative', 'neutral')
    """
    return _VALENCE.get(emotion.strip().lower(), "")


@dataclass
class Scenario:
    """One conversation opening.

    `turns` is the dialogue prefix as (speaker, text) pairs; the user is `mascot.group.dialogue.USER`
    and the prefix ends with a user turn, so the group replies next. `situation` is the scene the
    speakers and judges are shown (ED prompt, ESConv situation, or a meeting excerpt).
    """

    id: str
    setting: str
    source: str
    situation: str
    turns: list[tuple[str, str]]
    emotion: str = ""
    valence: str = ""
    split: str = "test"
    domain: str = ""  # QMSum: academic / committee / product
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.setting in SETTINGS, f"setting must be one of {SETTINGS}, got {self.setting!r}"
        assert self.split in SPLITS, f"split must be one of {SPLITS}, got {self.split!r}"
        assert self.turns and self.turns[-1][0] == USER, f"scenario {self.id}: the prefix must end with a user turn"

    @property
    def opening(self) -> str:
        """The user's first message."""
        return next(text for speaker, text in self.turns if speaker == USER)

    @property
    def last_user(self) -> str:
        return self.turns[-1][1]

    @property
    def group(self) -> str:
        """The column group a result is reported under: the valence for Empathetic Dialogues,
        `esconv-ood` for ESConv (out of domain), the meeting domain for QMSum."""
        if self.source == "esconv":
            return "esconv-ood"
        if self.setting == "meeting":
            return self.domain or "meeting"
        return self.valence or "unknown"

    def to_dialogue(self) -> Dialogue:
        """A fresh Dialogue holding the prefix, with situation and emotion set for prompts and judges."""
        return Dialogue(turns=[Turn(s, t) for s, t in self.turns], situation=self.situation, emotion=self.emotion)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["turns"] = [list(t) for t in self.turns]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Scenario:
        d = dict(d)
        d["turns"] = [(str(s), str(t)) for s, t in d["turns"]]
        return cls(**d)
