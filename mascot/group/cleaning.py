"""Reply cleaning: raw model output made into one in-character message, and the checks that decide
whether a draw is kept (meta talk, fragments, copies of earlier turns, unfinished sentences).

The chat's speaker, Stage-1 candidate generation, rewards and judges all clean replies here, so every
consumer sees the text a chat user would see."""

from __future__ import annotations

import difflib
import re

from mascot.group.dialogue import Dialogue
from mascot.group.personas import Persona
from mascot.group.prompts import strip_reasoning

MAX_REPLY_CHARS = 600
META_PATTERNS = (r"\bas an ai\b", r"\bas a language model\b", r"\bi am an ai\b", r"\bi'm an ai\b",
                 # text-editing and transcript talk of a small model that forgot it is in a conversation
                 r"\bhere(?:'s| is) (?:an? |the )?(?:edited|revised|rewritten|improved|updated) (?:version|text)\b",
                 r"\bhere(?:'s| is) the (?:ending|end|rest|continuation) of the (?:conversation|dialogue|story)\b",
                 r"\bhere(?:'s| is) (?:your|my|the) (?:next |new )?(?:message|response|reply)\b",
                 # writing-coach talk ("Here's an example of how you could respond.")
                 r"\bhere(?:'s| is) (?:an example of |one way |a way )?how (?:you|i|we) (?:could|can|might|should|would) (?:respond|reply|answer)\b",
                 r"\bhere(?:'s| is) an example (?:of )?(?:a |an )?(?:response|reply|answer)\b",
                 r"\bthe (?:user|assistant) (?:says|said|asks|asked|is asking)\b")
# How a reply that opens like meta talk starts: streaming holds such an opening back until it is decided.
_META_OPENERS = ("here's", "here is", "here\u2019s", "the user", "the assistant", "as an ai", "as a language model",
                 "i am an ai", "i'm an ai")
META_REDRAWS = 2  # a reply that is meta talk from its first sentence is drawn again, with other seeds, up to twice
# A reply of fewer words ("Theater.", "Laughter!", "The moment.", a row of emoji) is drawn again in the same way:
# none of them answers the user. The draw with the most words is kept. Three words ("You are brave.") make a reply.
MIN_REPLY_WORDS = 3
# A reply that copies an earlier persona turn of the conversation (word sequences at least this similar, difflib)
# is drawn again in the same way: in six three-message default chats, 4 of 48 persona turns copied an earlier one
# ("Hello there! Welcome to my office! What brings you here today?" four times in one chat, twice in one round).
REPEAT_RATIO = 0.8
# A finished utterance ends in sentence punctuation, a closing quote/bracket, or an emoji.
_FINISHED = re.compile(r"""([.!?…]["'”’)\]]*|[\U0001F300-\U0001FAFF\u2600-\u27BF]\ufe0f?|:\)|:-\))\s*$""")
# A sentence end inside a text: punctuation (+ closing quotes) followed by whitespace.
_SENTENCE_END = re.compile(r"""(?:[.!?…]["'”’)\]]*|[\U0001F300-\U0001FAFF\u2600-\u27BF]\ufe0f?)(?=\s)""")
_CLAUSE_END = re.compile(r"[,;:—–-](?=\s)")
_WORD = re.compile(r"[A-Za-z0-9À-ÿ']+")
# Words that cannot end a sentence: a clause cut after them reads as cut off.
_DANGLING = {"and", "but", "or", "so", "because", "the", "a", "an", "to", "of", "in", "on", "for", "with", "that",
             "which", "who", "when", "if", "as", "at", "by", "from", "my", "your", "our", "their", "is", "are", "was",
             "i", "just", "like", "about", "than", "then", "into", "not"}


def is_finished(text: str) -> bool:
    """True if the text ends like a finished utterance (sentence punctuation, closing quote, emoji)."""
    return bool(_FINISHED.search(text.strip()))


def count_words(text: str) -> int:
    return len(_WORD.findall(text))


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
    ends = [m.end() for m in _SENTENCE_END.finditer(t)]
    if ends and count_words(t[: ends[-1]]) >= min_words:
        return t[: ends[-1]].strip()
    return t


def finish_sentence(text: str, min_words: int = 3) -> str:
    """A reply that never stops mid-sentence, for everything a user, judge or reward model sees.

    Finished text is returned as is; otherwise it is cut back to its last finished sentence (when that
    keeps `min_words` words), else to its last clause boundary with a full stop, else (one unfinished
    clause) trailing dangling words are dropped and a full stop is added.

    >>> finish_sentence("I hear you. That must have been so hard, and when the")
    'I hear you.'
    >>> finish_sentence("That must have been so hard for you, and when the")
    'That must have been so hard for you.'
    >>> finish_sentence("You handled that with real courage and")
    'You handled that with real courage.'
    """
    t = text.strip()
    if not t or is_finished(t):
        return t
    trimmed = trim_to_sentence(t, min_words)
    if trimmed != t:
        return trimmed
    clauses = [m.start() for m in _CLAUSE_END.finditer(t)]
    if clauses and count_words(t[: clauses[-1]]) >= min_words:
        head = t[: clauses[-1]].rstrip()
    else:
        head = t.rstrip(" ,;:—–-")
    words = head.split()
    while len(words) > 1 and re.sub(r"[^a-z']", "", words[-1].lower()) in _DANGLING:
        words.pop()
    head = " ".join(words).rstrip(" ,;:—–-")
    return head + "." if head else t


PROMPT_LABELS = ("Tone", "Situation", "Director's instruction")  # headings of the speaker prompt (mascot.group.prompts)


def _tag_pattern(names: list[str]) -> str:
    alts = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True) if n)
    return rf"(?:\*\*|__)?(?:{alts})(?:\s*\([^)]*\))?(?:\*\*|__)?\s*:(?:\*\*)?"


def clean_reply(text: str, persona: Persona, roster: list[Persona], max_chars: int = MAX_REPLY_CHARS,
                finish: bool = True) -> str:
    """Make raw model output one in-character message: drop reasoning, leading speaker tags and stage
    directions, cut where it starts speaking as someone else, and bound the length at a sentence end. With
    `finish` (the default: chat, training and evaluation all see this) a reply cut by the token budget
    is trimmed to its last complete sentence (`finish_sentence`); streaming passes `finish=False` for
    the partial text shown while tokens arrive."""
    text = strip_reasoning(text)
    own = [persona.name, persona.role, *persona.aliases, "Assistant"]
    # a reply that opens with a label echoed from its prompt: the director's tone ("Calm and empathetic: You're
    # ...", 5 of 360 trained and 9 of 360 Zero-Shot replies on fresh2 open with such a label) or a prompt heading
    labels = [*own, *persona.tone_options(), *PROMPT_LABELS]
    text = re.sub(rf"^\s*{_tag_pattern(labels)}\s*", "", text, flags=re.I)
    others = [n for p in roster if p.name != persona.name for n in (p.name, *p.aliases)] + ["User", "Director", "Assistant"]
    m = re.search(rf"(?:^|\n|(?<=[.!?]) )\s*{_tag_pattern(others)}", text, flags=re.I)
    if m:
        text = text[: m.start()]
    text = re.sub(rf"\n\s*{_tag_pattern(own)}\s*", " ", text, flags=re.I)  # a repeated own tag mid-text
    text = text.strip().split("\n", 1)[0] if "\n" in text.strip() else text  # one message = one paragraph
    text = re.sub(r"\s+", " ", trim_emoji_runs(strip_stage_directions(text))).strip().strip('"').strip()
    if len(text) > max_chars:
        cut = text[:max_chars]
        end = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "), cut.rfind(".\n"))
        text = cut[: end + 1] if end > max_chars // 3 else cut.rstrip()
    return finish_sentence(text) if finish else text


# A run of emoji or hashtags. The 135M speakers sometimes end a reply with a dozen of them ("I'm here to support
# you every step of the way! 🚀💡🏼👨‍🔬🎉💪🔥🔮🐦"; 5 of 1,182 trained replies and 14 of the warm start's in the
# three-round evaluations, none of the prompted baselines'); a run keeps its first emoji, and two or more hashtags
# in a row are dropped.
_EMOJI_BASE = "[\U0001F000-\U0001F3FA\U0001F400-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF]"  # skin tones: modifiers
_EMOJI_CLUSTER = rf"{_EMOJI_BASE}(?:[\uFE0F\U0001F3FB-\U0001F3FF]|\u200D{_EMOJI_BASE})*"
_EMOJI_RUN = re.compile(rf"({_EMOJI_CLUSTER})(?:\s*{_EMOJI_CLUSTER})+")
_HASHTAG_RUN = re.compile(r"(?:\s*#\w+){2,}\.?")


def trim_emoji_runs(text: str) -> str:
    """The text with each run of emoji cut to its first one and runs of hashtags removed."""
    return _HASHTAG_RUN.sub("", _EMOJI_RUN.sub(lambda m: m.group(1), text))


# A stage direction: a parenthetical of up to twelve words that opens the reply or a sentence ("(sighing) Ah,
# alright.", "... here? (Reflective pause) You know"). The trained 135M speakers wrote them in 11 of Anchor's 91
# warm-start targets; in a chat they read as the model narrating itself, not as the persona speaking. A
# parenthesised sentence ("(It helps me too.)") and a parenthetical that ends the text are kept.
_STAGE = re.compile(r"(?:^|(?<=[.!?])\s+)\((?:[^()\s]+\s*){1,12}(?<![.!?])\)\s*(?=\S)")


def has_stage_direction(text: str) -> bool:
    """True if the text opens it or a sentence with a short parenthetical such as "(sighs)" or "(to the user)"."""
    return bool(_STAGE.search(text))


def strip_stage_directions(text: str) -> str:
    """The text without its stage directions (see `has_stage_direction`)."""
    return _STAGE.sub(lambda m: " " if m.start() else "", text).strip()


def has_meta_talk(text: str) -> bool:
    """True if the text breaks character with assistant meta-talk ("As an AI ...")."""
    return any(re.search(p, text, flags=re.I) for p in META_PATTERNS)


def cut_meta_talk(text: str) -> str:
    """The text before the sentence in which meta talk starts ("" when it opens with it; unchanged without).

    The 135M speakers sometimes forget they are in a conversation and answer as a text editor ("Here's a
    revised version of your text."): about 1 in 100 replies, mostly as the whole reply. Nothing from that sentence on is in character.

    >>> cut_meta_talk("That sounds hard. Here is an edited version of your text.")
    'That sounds hard.'
    """
    starts = [m.start() for p in META_PATTERNS for m in [re.search(p, text, flags=re.I)] if m]
    if not starts:
        return text
    ends = [m.end() for m in _SENTENCE_END.finditer(text[: min(starts)])]
    return text[: ends[-1]].strip() if ends else ""


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def earlier_turns(dialogue: Dialogue) -> list[list[str]]:
    """The words of every persona (non-user) turn so far: what a new reply must not copy."""
    return [_words(t.text) for t in dialogue.turns if not t.is_user and t.text.strip()]


def repeats_turn(text: str, earlier: list[list[str]], ratio: float = REPEAT_RATIO) -> bool:
    """True if the reply is (nearly) a copy of an earlier turn: its words match one's at difflib ratio >= `ratio`.

    >>> repeats_turn("Hello there! Welcome to my office!", [_words("hello there, welcome to my office")])
    True
    >>> repeats_turn("Hello there! I'm glad your friend is moving.", [_words("Hello there! Welcome to my office!")])
    False
    """
    w = _words(text)
    return len(w) >= MIN_REPLY_WORDS and any(difflib.SequenceMatcher(None, w, e, autojunk=False).ratio() >= ratio
                                             for e in earlier)


def copying_so_far(text: str, earlier: list[list[str]]) -> bool:
    """True while a streamed reply's words so far are the start of an earlier turn (its last word may be cut):
    such a reply is held back until it departs from every earlier turn, so a copy is never shown."""
    w = _words(text)
    if not w:
        return False
    return any(len(e) >= len(w) and e[: len(w) - 1] == w[:-1] and e[len(w) - 1].startswith(w[-1]) for e in earlier)


def might_open_meta(text: str) -> bool:
    """True while a streamed reply's opening could still turn into meta talk ("Here's a revised ..."): such an
    opening is held back until it is decided (at most the patterns' eight words)."""
    t = re.sub(r"\s+", " ", text.lstrip().lower())
    return count_words(t) <= 8 and any(t.startswith(o) or o.startswith(t) for o in _META_OPENERS)




def finalize_reply(raw: str, persona: Persona, roster: list[Persona]) -> str:
    """A finished draw as the user gets it: cleaned, cut before any meta talk, ending on a whole sentence."""
    return finish_sentence(cut_meta_talk(clean_reply(raw, persona, roster)))
