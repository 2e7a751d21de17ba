"""Dialogue state shared by chat, rollouts and evaluation: turns, directives and transcripts."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

USER = "user"


@dataclass(frozen=True)
class Directive:
    """The director's instruction for one step (the paper's Agent / Action / Tone format)."""

    speaker: str
    action: str = ""
    tone: str = ""

    def render(self) -> str:
        """The paper's three-line format, shown in the UI and given to the speaker."""
        return f"Agent: {self.speaker}\nAction: {self.action}\nTone: {self.tone}"

    def to_json(self) -> str:
        return json.dumps({"speaker": self.speaker, "action": self.action, "tone": self.tone}, ensure_ascii=False)


@dataclass
class Turn:
    """One message: from the user or from a persona (with the directive that produced it)."""

    speaker: str
    text: str
    directive: Directive | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def is_user(self) -> bool:
        return self.speaker == USER

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["directive"] = asdict(self.directive) if self.directive else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Turn:
        directive = Directive(**d["directive"]) if d.get("directive") else None
        return cls(speaker=d["speaker"], text=d["text"], directive=directive, meta=dict(d.get("meta") or {}))


@dataclass
class Dialogue:
    """A whole conversation plus its optional scenario (situation/emotion) used by prompts and judges."""

    turns: list[Turn] = field(default_factory=list)
    situation: str = ""
    emotion: str = ""

    def add(self, turn: Turn) -> Turn:
        self.turns.append(turn)
        return turn

    def last_user_index(self) -> int:
        for i in range(len(self.turns) - 1, -1, -1):
            if self.turns[i].is_user:
                return i
        return -1

    def last_user_text(self) -> str:
        i = self.last_user_index()
        return self.turns[i].text if i >= 0 else ""

    def current_round(self) -> list[Turn]:
        """Persona turns since the last user message."""
        return self.turns[self.last_user_index() + 1 :]

    def last_speaker(self) -> str | None:
        return self.turns[-1].speaker if self.turns else None

    def transcript(self, max_turns: int | None = None, user_label: str = "User") -> str:
        """Plain-text transcript with every turn attributed by name."""
        turns = self.turns[-max_turns:] if max_turns else self.turns
        return "\n".join(f"{user_label if t.is_user else t.speaker}: {t.text}" for t in turns)

    def to_dict(self) -> dict[str, Any]:
        return {"situation": self.situation, "emotion": self.emotion, "turns": [t.to_dict() for t in self.turns]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Dialogue:
        return cls(
            turns=[Turn.from_dict(t) for t in d.get("turns", [])],
            situation=d.get("situation", ""),
            emotion=d.get("emotion", ""),
        )
