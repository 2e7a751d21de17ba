"""Format reward: 1.0 for a single, clean, in-character utterance of the right length, else 0.0.

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

from mascot.speaker import has_meta_talk

GENERIC_TAGS = ("User", "Assistant", "Director", "System", "AI")
# A finished utterance ends in sentence punctuation, a closing quote/bracket, or an emoji.
_FINISHED = re.compile(r"""([.!?…]["'”’)\]]*|[\U0001F300-\U0001FAFF\u2600-\u27BF]\ufe0f?|:\)|:-\))\s*$""")
_WORD = re.compile(r"[A-Za-z0-9À-ÿ']+")


def completion_text(completion: Any) -> str:
    """TRL passes completions as text or as `[{"role": "assistant", "content": ...}]`."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(m.get("content", "") if isinstance(m, dict) else str(m) for m in completion)
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return str(completion)


def is_finished(text: str) -> bool:
    """True if the text ends like a finished utterance (sentence punctuation, closing quote, emoji)."""
    return bool(_FINISHED.search(text.strip()))


def trim_to_sentence(text: str, min_words: int = 5) -> str:
    """Cut a reply that stops mid-sentence (token budget) back to its last finished sentence, if that
    leaves at least `min_words` words; otherwise return it unchanged.

    >>> trim_to_sentence("That sounds hard. It makes sense you feel tired, and when the")
    'That sounds hard. It makes sense you feel tired, and when the'
    >>> trim_to_sentence("That sounds really hard for you. It makes sense that you feel")
    'That sounds really hard for you.'
    """
    t = text.strip()
    if is_finished(t):
        return t
    ends = [m.end() for m in re.finditer(r"[.!?…][\"'”’)\]]*(?=\s)", t)]
    if ends and count_words(t[: ends[-1]]) >= min_words:
        return t[: ends[-1]].strip()
    return t


def count_words(text: str) -> int:
    return len(_WORD.findall(text))


@dataclass
class FormatResult:
    ok: bool
    problems: list[str] = field(default_factory=list)


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
        if "\n" in stripped:
            problems.append("several lines")
        if self.require_finished and not _FINISHED.search(stripped):
            problems.append("unfinished")
        n = count_words(stripped)
        if n < self.min_words:
            problems.append("too short")
        elif n > self.max_words:
            problems.append("too long")
        return FormatResult(not problems, problems)


def make_format_reward(names: Sequence[str], min_words: int = 15, max_words: int = 150,
                       aliases: dict[str, Sequence[str]] | None = None) -> Callable[..., list[float]]:
    """A TRL reward function `format_reward(completions, **kwargs) -> list[float]` (1.0 or 0.0 each)."""
    checker = FormatChecker(names, min_words, max_words, aliases)

    def format_reward(completions: list[Any], persona: list[str] | None = None, **kwargs: Any) -> list[float]:
        personas = persona or [None] * len(completions)
        return [1.0 if checker(completion_text(c), p).ok else 0.0 for c, p in zip(completions, personas)]

    return format_reward
