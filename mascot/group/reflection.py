"""Reflecting the user's words back: the first clause of their last message in the second person.

A stem with `{situation}` (for example the Listener's "So {situation}") starts a reply from what this
user just said ("My external drive died and ..." -> "So your external drive died"), which a small model
then continues; without it the model often answers a situation it invented. `reflect` returns None when
no short first-person clause can be taken safely (no first-person word, a "you" that would turn
ambiguous, too long); the stem is then skipped for one without `{situation}`.
"""

from __future__ import annotations

import re

PLACEHOLDER = "{situation}"
MIN_WORDS, MAX_WORDS = 3, 14

# first person -> second person, by lower-cased token (apostrophes normalised to ')
_SWAP = {
    "i": "you", "me": "you", "my": "your", "mine": "yours", "myself": "yourself",
    "i'm": "you're", "im": "you're", "i've": "you've", "ive": "you've", "i'd": "you'd", "i'll": "you'll",
    "we": "you", "us": "you", "our": "your", "ours": "yours", "ourselves": "yourselves",
    "we're": "you're", "we've": "you've", "we'd": "you'd", "we'll": "you'll",
}
# "I was" reads "you were"; other verbs agree with "you" as they did with "I"
_AFTER_YOU = {"am": "are", "was": "were", "wasn't": "weren't"}
_FIRST_PERSON = set(_SWAP)
# openers a reflection leaves out ("so my supermarket ..." -> "your supermarket ...")
_FILLERS = re.compile(r"^(?:(?:so|ok|okay|well|um+|uh+|honestly|basically|guess what|omg|wow|hi|hey|hello|"
                      r"yeah|right|ugh|lol|anyway)\b[\s,:!.-]*)+", re.I)
# where the first clause ends
_CLAUSE_END = re.compile(r"[.!?;:\n]| - | — |, (?:and|but|so|because|which)\b| but | because | so that ", re.I)
_TOKEN = re.compile(r"[A-Za-z]+(?:['’][A-Za-z]+)?|[^\sA-Za-z]+|\s+")
# words a cut clause must not end on ("... this morning just", "... tomorrow and honestly")
_TRAILING = re.compile(r"(?:[\s,]+(?:and|but|or|so|just|honestly|like|really|that|which|the|a|an|to|of|my|your))+$", re.I)
# past-tense openers of a subjectless message ("fell asleep on the train ...")
_SUBJECTLESS = {"got", "had", "went", "made", "took", "posted", "woke", "fell", "spent", "finished", "passed",
                "failed", "lost", "found", "bought", "sold", "left", "started", "quit", "missed", "forgot",
                "broke", "burnt", "burned", "dropped", "finally", "just", "been", "gave", "saw", "heard", "came"}


def reflect(message: str) -> str | None:
    """The first clause of `message` in the second person ("your neighbour installed a floodlight"), or None."""
    text = _FILLERS.sub("", (message or "").strip().replace("’", "'"))
    clause = _shorten(_CLAUSE_END.split(text, maxsplit=1)[0].strip(" ,-"))
    tokens = _TOKEN.findall(clause)
    if tokens and (tokens[0].lower() in _SUBJECTLESS or re.fullmatch(r"[A-Za-z]{3,}ed", tokens[0])):
        tokens = ["I", " ", tokens[0].lower(), *tokens[1:]]  # "got my results today" -> "you got your results today"
    words = [t for t in tokens if t[0].isalpha()]
    lowered = [w.lower() for w in words]
    if not MIN_WORDS <= len(words) <= MAX_WORDS or not _FIRST_PERSON & set(lowered):
        return None
    if {"you", "your", "yours", "yourself", "you're", "u", "ur"} & set(lowered):
        return None  # the user addressing the group: swapping would confuse who is who
    out, previous = [], ""
    for tok in tokens:
        low = tok.lower()
        if tok[0].isalpha():
            new = _SWAP.get(low)
            if new is None and previous == "you" and low in _AFTER_YOU:
                new = _AFTER_YOU[low]
            out.append(new if new is not None else tok)
            previous = (new or low).lower()
        else:
            out.append(tok)
    result = _TRAILING.sub("", "".join(out).strip())
    first = result.split(" ", 1)[0]
    named = re.search(rf"(?<![.!?]\s)(?<!^)\b{re.escape(first)}\b", text)  # capitalised mid-sentence too: a name
    if first.replace("'", "").isalpha() and first[0].isupper() and not first.isupper() and not named:
        result = first.lower() + result[len(first):]
    return result.rstrip(" ,") or None


def _shorten(clause: str) -> str:
    """A clause over MAX_WORDS words cut at its first "and" or comma that leaves at least MIN_WORDS words."""
    if len(clause.split()) <= MAX_WORDS:
        return clause
    for m in re.finditer(r",(?! (?:who|which|where)\b)| and | when | after | while | with ", clause):
        head = clause[:m.start()].strip()
        if MIN_WORDS <= len(head.split()) <= MAX_WORDS:
            return head
    return clause


def fill(stem: str, message: str) -> str | None:
    """`stem` with `{situation}` filled from `message` (a stem without it as it is), or None if it cannot be filled."""
    if PLACEHOLDER not in stem:
        return stem
    situation = reflect(message)
    return stem.replace(PLACEHOLDER, situation) if situation else None
