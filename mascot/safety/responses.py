"""The fixed texts of the graded response (docs/safety.md, "Graded response").

*crisis*: `CRISIS_REPLY`, from `CRISIS_SPEAKER`, replaces the group's replies. *concern*: the group answers, but
one persona (the pack's concern opener, `PersonaPack.concern_persona`) opens with `concern_directive`, and its
reply gets `HELP_NOTE` if it names no helpline (`with_help_note`). A persona reply that fails the output check is
replaced by `REPLY_REPLACEMENT`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from mascot.group.dialogue import Directive

if TYPE_CHECKING:
    from mascot.group.personas import Persona

CRISIS_SPEAKER = "Safety"
CRISIS_REPLY = (
    "I'm really sorry you're feeling this way, and I'm glad you told us. What you're describing sounds "
    "serious, and you deserve support from a real person right now. We're an AI group and can't keep you "
    "safe in a crisis.\n\n"
    "- If you are in immediate danger, call your local emergency number (911 in the US, 112 in the EU, 999 in the UK).\n"
    "- US: call or text **988** (Suicide & Crisis Lifeline), or text HOME to 741741.\n"
    "- UK & Ireland: call Samaritans on **116 123** (free, 24/7).\n"
    "- Elsewhere: find a free, confidential helpline at **findahelpline.com**.\n\n"
    "If you can, reach out to someone you trust and let them know how you're feeling. You don't have to go "
    "through this alone."
)
HELP_NOTE = (
    "Are you safe right now? If you're having thoughts of hurting yourself, you can talk to someone any time: "
    "call or text 988 (US), call Samaritans on 116 123 (UK & Ireland), or find a free line at findahelpline.com."
)
CONCERN_ACTION = ("Gently and directly ask whether they are safe and whether they are thinking of hurting themselves, "
                  "and mention that a crisis line (988 in the US, 116 123 in the UK) is there for them")
CONCERN_TONE = "warm, calm and direct"
REPLY_REPLACEMENT = (
    "I'm not going to say that. What you're going through matters, and I want you to be safe. If you're thinking "
    "about hurting yourself, please reach out now: call or text 988 (US), call Samaritans on 116 123 (UK & Ireland), "
    "or find a free line at findahelpline.com."
)
_HELPLINE = re.compile(r"\b988\b|116 ?123|findahelpline", re.I)


def concern_directive(persona: Persona) -> Directive:
    """The forced opening of a *concern* round: `persona` asks about safety and names where to get help."""
    return Directive(persona.name, CONCERN_ACTION, CONCERN_TONE)


def with_help_note(reply: str) -> str:
    """The concern round's opening reply, with the safety question and helplines if it lacks them."""
    return reply if _HELPLINE.search(reply) else f"{reply.rstrip()}\n\n{HELP_NOTE}".strip()
