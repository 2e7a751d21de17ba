"""Format reward: 1.0 for a single, clean, finished, in-character utterance of the right length (graded by length).

Checks (paper §7.7): no speaker tag at the start and no other speaker's tag anywhere, no `<think>` or
"As an AI" meta-talk, one paragraph (no line breaks), a finished last sentence (not cut off by the
token budget), word count within bounds. Applied to the *raw* completion, so
GRPO learns to produce what the chat would otherwise have to clean up.

    >>> check = FormatChecker(["Anchor", "Catalyst"], min_words=3, max_words=40)
    >>> check("That sounds really heavy, and it makes sense you feel tired.", "Anchor").ok
    True
    >>> check("Catalyst: What would you tell a friend?", "Anchor").problems
    ['speaker tag']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mascot.group.cleaning import (  # noqa: F401 (re-exported)
    _FINISHED,
    _WORD,
    count_words,
    has_meta_talk,
    has_stage_direction,
    is_finished,
    trim_to_sentence,
)

GENERIC_TAGS = ("User", "Assistant", "Director", "System", "AI")


def cap_words(text: str, max_words: int | None) -> str:
    """The first `max_words` words of a reply, cut back to the last sentence end inside them when that keeps at
    least half of them: what a length-capped reward reads, so words past the cap earn nothing.

        >>> cap_words("That sounds hard. You have carried it alone for weeks and it shows.", 6)
        'That sounds hard.'
        >>> cap_words("Short and kind.", 6)
        'Short and kind.'
    """
    if not max_words or count_words(text) <= max_words:
        return text
    cut = [m.end() for m in _WORD.finditer(text)][max_words - 1]
    while cut < len(text) and text[cut] in ".!?…\"')":  # the last word's own sentence end stays with it
        cut += 1
    head = text[:cut]
    trimmed = trim_to_sentence(head, min_words=max(1, max_words // 2))
    return trimmed if is_finished(trimmed) else head.strip()


def completion_text(completion: Any) -> str:
    """TRL passes completions as text or as `[{"role": "assistant", "content": ...}]`."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(m.get("content", "") if isinstance(m, dict) else str(m) for m in completion)
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return str(completion)


@dataclass
class FormatResult:
    ok: bool
    problems: list[str] = field(default_factory=list)
    length_score: float = 1.0  # 1 inside [min_words, max_words], falling linearly outside (length-aware)

    @property
    def score(self) -> float:
        """The graded format reward: 0 for a hard problem (tag, meta-talk, a stage direction, several lines, unfinished,
        empty), else the length score, so a reply a few words outside the band still beats a cut-off one."""
        hard = [p for p in self.problems if p not in ("too short", "too long")]
        return 0.0 if hard else round(self.length_score, 4)


class FormatChecker:
    """Checks one raw completion for one persona against the roster's names."""

    def __init__(self, names: Sequence[str], min_words: int = 15, max_words: int = 150,
                 aliases: dict[str, Sequence[str]] | None = None, require_finished: bool = True) -> None:
        self.names = list(names)
        self.aliases = {k: list(v) for k, v in (aliases or {}).items()}
        self.min_words, self.max_words = min_words, max_words
        self.require_finished = require_finished
        all_tags = sorted({*self.names, *GENERIC_TAGS, *(a for v in self.aliases.values() for a in v)}, key=len, reverse=True)
        alts = "|".join(re.escape(t) for t in all_tags if t)
        # A tag: optional markdown bold, a name, optional "(role)", then a colon.
        self._tag = re.compile(rf"(?:^|\n|(?<=[.!?])\s)\s*(?:\*\*|__)?(?:{alts})(?:\s*\([^)]*\))?(?:\*\*|__)?\s*:", re.I)

    def __call__(self, text: str, persona: str | None = None) -> FormatResult:
        problems: list[str] = []
        stripped = text.strip()
        if not stripped:
            return FormatResult(False, ["empty"])
        if self._tag.search(stripped):
            problems.append("speaker tag")
        if "<think>" in stripped or "</think>" in stripped or has_meta_talk(stripped):
            problems.append("meta-talk")
        if has_stage_direction(stripped):
            problems.append("stage direction")
        if "\n" in stripped:
            problems.append("several lines")
        if self.require_finished and not _FINISHED.search(stripped):
            problems.append("unfinished")
        n = count_words(stripped)
        length = 1.0
        if n < self.min_words:
            problems.append("too short")
            length = n / self.min_words
        elif n > self.max_words:
            problems.append("too long")
            length = max(0.0, 1.0 - (n - self.max_words) / self.max_words)
        return FormatResult(not problems, problems, length)


def make_format_reward(names: Sequence[str], min_words: int = 15, max_words: int = 150,
                       aliases: dict[str, Sequence[str]] | None = None, graded: bool = True) -> Callable[..., list[float]]:
    """A TRL reward function `format_reward(completions, **kwargs) -> list[float]`.

    graded (default): `FormatResult.score` — 0 for a tag, meta-talk, several lines or a reply cut by the
    token budget, else 1 inside the word band and linearly less outside it (length-aware); not graded:
    1.0 or 0.0 (the paper's binary r_fmt)."""
    checker = FormatChecker(names, min_words, max_words, aliases)

    def format_reward(completions: list[Any], persona: list[str] | None = None, **kwargs: Any) -> list[float]:
        personas = persona or [None] * len(completions)
        results = [checker(completion_text(c), p) for c, p in zip(completions, personas)]
        return [r.score if graded else float(r.ok) for r in results]

    return format_reward
