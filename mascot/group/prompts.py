"""Pure prompt builders shared by the live chat, training data and evaluation baselines.

Keeping these in one place guarantees that a speaker adapter is trained on exactly the prompt
it sees in the chat, and that baselines differ from MASCOT only where they are meant to.
"""

from __future__ import annotations

import re

from mascot.backends.base import Messages
from mascot.errors import unknown_name
from mascot.group.dialogue import Dialogue, Directive
from mascot.group.personas import Persona

# Speaker prompt styles: "persona" is what the chat and the trained adapters use; the others
# are the paper's prompted baselines (Zero-Shot, Few-Shot, CoT variants, w/o personas).
SPEAKER_STYLES = ("persona", "zero-shot", "few-shot", "cot", "few-shot-cot", "no-persona")
COT_MARKER = "Reply:"
HISTORY_TURNS = 8  # recent turns shown to speakers; bounds prompt length and re-encoding cost


def check_style(style: str) -> str:
    if style not in SPEAKER_STYLES:
        raise unknown_name("speaker prompt style", style, SPEAKER_STYLES)
    return style


def _persona_block(p: Persona, with_examples: bool) -> str:
    lines = [f"You are {p.name}, the {p.role} of a small companion group chatting with a user.", f"Your goal: {p.goal}"]
    if p.behaviours:
        lines.append("You always: " + "; ".join(p.behaviours) + ".")
    if p.avoid:
        lines.append("You never: " + "; ".join(p.avoid) + ".")
    if p.style:
        lines.append(f"Style: {p.style}")
    if with_examples and p.examples:
        lines.append("Example lines of yours:\n" + "\n".join(f"- {e}" for e in p.examples))
    return "\n".join(lines)


def speaker_messages(
    persona: Persona,
    roster: list[Persona],
    dialogue: Dialogue,
    directive: Directive | None = None,
    style: str = "persona",
    max_turns: int = HISTORY_TURNS,
) -> Messages:
    """The chat a speaker answers: persona card, director's instruction, attributed history."""
    check_style(style)
    others = [p.name for p in roster if p.name != persona.name]
    if style == "no-persona":
        system = "You are a helpful, supportive assistant chatting with a user. Reply in 1-3 sentences."
        name = "Assistant"
    else:
        system = _persona_block(persona, with_examples=style in ("persona", "few-shot", "few-shot-cot"))
        if others:
            system += f"\nOther group members: {', '.join(others)}. Add something new; do not repeat them."
        if directive is not None and (directive.action or directive.tone):
            system += f"\nDirector's instruction for this turn: {directive.action} Tone: {directive.tone}."
        system += f"\nWrite only {persona.name}'s next message: 1-3 sentences, no name tag, no one else's lines."
        name = persona.name
    if style in ("cot", "few-shot-cot"):
        system += f"\nFirst think briefly in one line starting with 'Thought:', then write the message after '{COT_MARKER}'."
    history = dialogue.transcript(max_turns=max_turns) or "(no messages yet)"
    scene = f"Situation: {dialogue.situation}\n" if dialogue.situation else ""
    user = f"{scene}Conversation so far:\n{history}\n\nWrite {name}'s next message."
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def strip_reasoning(text: str) -> str:
    """Drop CoT reasoning and <think> blocks, keeping only the reply."""
    text = re.sub(r"<think>.*?(</think>|$)", "", text, flags=re.S)
    if COT_MARKER in text:
        text = text.split(COT_MARKER, 1)[1]
    elif text.lstrip().startswith("Thought:"):
        parts = text.strip().split("\n", 1)
        text = parts[1] if len(parts) > 1 else ""
    return text.strip()


DIRECTOR_PREFILL = '{"speaker": "'


def director_messages(roster: list[Persona], dialogue: Dialogue, max_speakers: int, max_turns: int = HISTORY_TURNS,
                      min_speakers: int = 1) -> Messages:
    """The chat the director answers with a JSON directive (or `none` to yield to the user). The question
    lists only the valid answers now: personas who have not replied this round (and did not speak last),
    and `none` once at least `min_speakers` have replied."""
    members = "\n".join(f"- {p.name} ({p.role}): {p.goal}" for p in roster)
    spoken = [t.speaker for t in dialogue.current_round()]
    floor = min(min_speakers, max_speakers, max(1, len(roster)))
    system = (
        "You are the director of a group chat between a user and these companions:\n"
        f"{members}\n"
        "Pick who should speak next so that each message adds something new, and tell them what to do.\n"
        'Answer with JSON only: {"speaker": "<name>", "action": "<what to do>", "tone": "<tone>"}.\n'
        f"At least {floor} and at most {max_speakers} companions speak after each user message. "
        'To give the floor back to the user, answer {"speaker": "none"}.'
    )
    status = f"Already spoke since the user's last message: {', '.join(spoken) if spoken else 'nobody'}."
    last = dialogue.last_speaker()
    options = [p.name for p in roster if p.name not in spoken and (p.name != last or len(roster) == 1)]
    if len(spoken) >= floor or not options:
        options.append("none")
    choice = options[0] if len(options) == 1 else f"{', '.join(options[:-1])} or {options[-1]}"
    user = f"Conversation so far:\n{dialogue.transcript(max_turns=max_turns)}\n\n{status}\nWho speaks next: {choice}?"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
