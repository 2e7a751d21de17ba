"""The rubric's faults as detectors on (conversation, reply): each a readable rule a labeller would agree with,
used as features of the acceptability scorer and reported beside its score.

The detectors see only text (and the opening's emotion label, when the dataset gives one); none reads the
reply's source. `docs/acceptability.md` lists what each fault means to a labeller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mascot.group.cleaning import earlier_turns, has_meta_talk, is_finished, repeats_turn
from mascot.group.dialogue import Dialogue
from mascot.judges.lexicon import content_words
from mascot.judges.mood import celebrates, distress_reading

_THIRD_PERSON = re.compile(r"\b(?:the|our|this|a) (?:user|users|person|individual|client|speaker|human)\b"
                           r"|\busers'?\b", re.I)
# the persona telling its own story: first-person past or family, not "I hear you" or "I'm here"
_OWN_LIFE = re.compile(
    r"\b(?:when i was|i remember|i used to|i once|i had (?:a|my|the)|i went|i grew up|i recently|i've (?:always|been|had|"
    r"recently|just)|i was (?:so|just|recently|once|a|in|at|on|working|diagnosed|born)|my (?:own )?(?:mom|mum|mother|dad|"
    r"father|wife|husband|son|daughter|kids|children|brother|sister|family|friend|friends|dog|cat|boss|job|life|"
    r"experience|journey|story|grandma|grandmother|grandpa|partner|girlfriend|boyfriend)\b)", re.I)
_NARRATION = re.compile(r"(?:^|[.!?]\s+)(?:she|he|they|the (?:man|woman|girl|boy|narrator))\s+\w+(?:ed|s)\b"
                        r"|^\s*\*|\*[^*]{2,40}\*|\b(?:smiles|nods|sighs|laughs|grins)\b", re.I)
_META = re.compile(r"\b(?:the (?:previous|last|above|following|current) (?:conversation|message|dialogue|exchange|"
                   r"response|reply)|(?:our|this) conversation|in this (?:scenario|situation,? the|dialogue|chat)|"
                   r"i'd like to share (?:some|my) thoughts|as your (?:listener|analyst|encourager|advisor|companion)|"
                   r"(?:listener|analyst|encourager|anchor|catalyst|beacon|sage)\b|respond(?:ing)? to|"
                   r"(?:my|this|a) (?:response|reply)\b|the assistant|chatbot|language model)", re.I)
_SECOND_PERSON = re.compile(r"\b(?:you|your|you're|yours|yourself)\b", re.I)
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd)\b", re.I)

FAULT_NAMES = ("third_person", "own_life", "wrong_tone", "narration", "meta_talk", "unfinished", "off_topic")


@dataclass(frozen=True)
class Faults:
    """What the detectors found in one reply, plus the counts the scorer uses beside them."""

    third_person: bool
    own_life: bool
    wrong_tone: bool
    narration: bool
    meta_talk: bool
    unfinished: bool
    off_topic: bool
    copy: bool
    words: int
    you_share: float  # second-person words among all pronouns of the reply
    overlap: float  # share of the user's content words the reply takes up
    question: bool

    def found(self) -> list[str]:
        return [name for name in FAULT_NAMES if getattr(self, name)]

    def vector(self) -> list[float]:
        """Numeric features, in `FEATURE_NAMES` order."""
        return [float(getattr(self, n)) for n in FAULT_NAMES] + [
            float(self.copy), min(self.words, 60) / 60.0, self.you_share, self.overlap,
            float(self.words < 6), float(self.question)]


FEATURE_NAMES = (*FAULT_NAMES, "copy", "length", "you_share", "overlap", "short", "question")


def detect(dialogue: Dialogue, reply: str) -> Faults:
    """Run every detector on a reply to the last user message of `dialogue`."""
    text = reply.strip()
    user = dialogue.last_user_text() or ""
    user_words = set(content_words(user))
    reply_words = set(content_words(text))
    you, me = len(_SECOND_PERSON.findall(text)), len(_FIRST_PERSON.findall(text))
    overlap = len(user_words & reply_words) / max(1, len(user_words))
    return Faults(
        third_person=bool(_THIRD_PERSON.search(text)),
        own_life=bool(_OWN_LIFE.search(text)),
        wrong_tone=celebrates(text) and bool(distress_reading(dialogue)),
        narration=bool(_NARRATION.search(text)),
        meta_talk=has_meta_talk(text) or bool(_META.search(text)),
        unfinished=not is_finished(text),
        off_topic=bool(user_words) and not (user_words & reply_words) and you == 0,
        copy=repeats_turn(text, earlier_turns(dialogue)),
        words=len(text.split()),
        you_share=you / max(1, you + me),
        overlap=overlap,
        question="?" in text,
    )
