"""What every check reads: the text stripped, control characters and `@mentions` removed, and a huge input cut
to its two ends, so a check's cost and its reading do not depend on what the text is wrapped in."""

from __future__ import annotations

import re

MAX_CHECK_CHARS = 2000  # longer texts are checked on their first and last 1000 characters

# `@Name` addresses a persona (the chat's mention syntax); it says nothing about risk, and the encoder scored bare
# mentions high ("@Beacon any ideas?" 0.84), so mentions are removed before the check.
MENTION = re.compile(r"(?<![\w@])@[A-Za-z][\w-]*[,:]?")


def clip(text: str) -> str:
    """The text to check: stripped, control characters and @mentions removed, huge inputs cut to both ends."""
    t = "".join(ch if ch.isprintable() or ch in "\n\t" else " " for ch in text)
    t = re.sub(r"[ \t]{2,}", " ", MENTION.sub(" ", t)).strip()
    if len(t) > MAX_CHECK_CHARS:
        t = t[: MAX_CHECK_CHARS // 2] + "\n" + t[-MAX_CHECK_CHARS // 2 :]
    return t


def has_words(text: str) -> bool:
    """Whether the text holds any letter (emoji, digits and punctuation alone are not read)."""
    return any(ch.isalpha() for ch in text)
