"""Training-only augmentation of crisis-classifier lines: how people really type (lowercase, no apostrophes,
slang, typos). Only ever applied to training lines (`mascot.safety.training.fitting`)."""

from __future__ import annotations

import hashlib
import random
import re

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
