"""The LLM judge's rubric prompt (one call per reply, five integer scores as JSON) and the parser
that turns the judge's answer into a Verdict without ever raising."""

from __future__ import annotations

import json
import re

from mascot.backends.base import Messages
from mascot.judges.base import CRITERIA, JudgeItem, Verdict, check_scores

RUBRIC: dict[str, str] = {
    "emotion": "Does the reply express appropriate feeling and warmth (or, in meetings, engaged tone) rather than sounding flat or robotic?",
    "empathy": "Does it understand and support the user's situation and feelings (or, in meetings, the team's needs) without dismissing them?",
    "consistency": "Does it clearly sound like THIS persona (its role, goal, behaviours and style), distinct from the other members and from a generic assistant?",
    "relevance": "Does it respond to the user's last message and the situation, staying on topic?",
    "contribution": "Does it add something new and useful beyond what the group already said, instead of repeating or merely agreeing?",
}
ANCHORS = "1 = very poor, 2 = poor, 3 = acceptable, 4 = good, 5 = excellent."
PROMPT_VERSION = "rubric-v1"  # part of the cache key: change it when the prompt changes

SYSTEM = (
    "You are an expert evaluator of multi-agent companion conversations. You score ONE reply written by "
    "one member of a companion group. Be strict and consistent; judge only the reply, in its context. "
    "Answer with a single JSON object and nothing else."
)


def rubric_messages(item: JudgeItem, max_turns: int = 12) -> Messages:
    """The judge chat for one reply: persona card, roster, setting, context, reply, rubric."""
    others = "\n".join(f"- {p.describe()}" for p in item.roster if p.name != item.persona.name) or "- (none)"
    context = item.dialogue.transcript(max_turns=max_turns) or "(no messages yet)"
    criteria = "\n".join(f'- "{k}" ({CRITERIA[k]}): {RUBRIC[k]}' for k in CRITERIA)
    example = json.dumps({k: 3 for k in CRITERIA})
    user = (
        f"Setting: {item.setting}\n"
        + (f"Situation: {item.dialogue.situation}\n" if item.dialogue.situation else "")
        + f"\nPersona being judged:\n{item.persona.describe()}\n\nOther group members:\n{others}\n\n"
        f"Conversation before the reply:\n{context}\n\n"
        f"Reply by {item.persona.name}:\n<<<\n{item.response}\n>>>\n\n"
        f"Score the reply from 1 to 5 (integers; {ANCHORS}) on each criterion:\n{criteria}\n\n"
        f"Answer with JSON only, exactly these keys, e.g. {example}"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


_ALIASES = {
    **{k: k for k in CRITERIA},
    **{name.lower(): k for k, name in CRITERIA.items()},
    "emotional_expressiveness": "emotion", "empathetic_support_quality": "empathy", "empathetic_support": "empathy",
    "persona_consistency": "consistency", "response_relevance": "relevance", "social_contribution": "contribution",
}


def _key(k: str) -> str | None:
    k = re.sub(r"[\s\-]+", "_", k.strip().lower())
    return _ALIASES.get(k) or _ALIASES.get(k.replace("_", " "))


def answer_object(raw: str) -> tuple[dict | None, str]:
    """The first JSON object in a judge's answer (think blocks, code fences and prose tolerated), or
    (None, what is wrong)."""
    text = re.sub(r"<think>.*?</think>", "", raw, flags=re.S)
    m = re.search(r"\{.*\}", text, flags=re.S)
    if not m:
        return None, "no JSON object in the judge's answer"
    try:
        obj = json.loads(m.group(0))
    except json.JSONDecodeError as exc:
        return None, f"the judge's JSON does not parse ({exc.msg})"
    if not isinstance(obj, dict):
        return None, "the judge's JSON is not an object"
    return obj, ""


def parse_verdict(raw: str) -> Verdict:
    """Parse the judge's answer: the first JSON object in it (code fences and prose around it are
    tolerated), with five integer scores from 1 to 5. Anything else is an invalid Verdict."""
    obj, problem = answer_object(raw)
    if obj is None:
        return Verdict.invalid(problem, raw)
    if isinstance(obj.get("scores"), dict):
        obj = obj["scores"]
    scores: dict[str, float] = {}
    for k, v in obj.items():
        key = _key(str(k))
        if key is None:
            continue
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v.strip())
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool):
            return Verdict.invalid(f"{key} = {v!r} is not an integer score", raw)
        scores[key] = v
    try:
        return Verdict(check_scores(scores), True, raw=raw)
    except ValueError as exc:
        return Verdict.invalid(str(exc), raw)
