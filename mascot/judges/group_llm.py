"""The LLM group judge: one rubric call per block of N turns, on any OpenAI-compatible endpoint.

Reuses the Stage-1 LLM judge's machinery (`mascot.judges.llm.LLMJudge`: SQLite cache keyed by model and
prompt, retries with back-off on timeouts, 429 and 5xx, parallel requests); a block the judge cannot score
(timeout after the retries, malformed answer) gets an invalid verdict, which the reward treats as missing.
The rubric lives here, in the repo; change `GROUP_PROMPT_VERSION` when you change it.
"""

from __future__ import annotations

import json
import re

from mascot.judges.group import GROUP_CRITERIA, GroupBlock, GroupJudge, GroupVerdict, check_group_scores
from mascot.judges.llm import LLMJudge
from mascot.judges.rubric import answer_object

GROUP_PROMPT_VERSION = "group-rubric-v1"
GROUP_RUBRIC: dict[str, str] = {
    "fidelity": "Does every companion stay true to its own persona (role, goal, style), distinct from the others?",
    "originality": "Does each turn add something specific and new, instead of repeating or paraphrasing earlier turns?",
    "relevance": "Do the turns answer the user's latest message and the situation, and follow on from each other coherently?",
    "engagement": "Does the group take up what the user newly said and share the floor, rather than one companion monopolising it?",
    "consistency": "Is the group consistent with itself: no contradictions of earlier turns, no re-opening of points already settled?",
}
SYSTEM = ("You are an expert evaluator of multi-agent companion conversations. You score a BLOCK of consecutive "
          "turns of a group chat as a whole. Be strict and consistent. Answer with a single JSON object only.")


def group_rubric_messages(block: GroupBlock, max_context: int = 12) -> list[dict[str, str]]:
    members = "\n".join(f"- {p.describe()}" for p in block.roster)
    context = block.context.transcript(max_turns=max_context) or "(no earlier messages)"
    turns = "\n".join(f"{'User' if t.is_user else t.speaker}: {t.text}" for t in block.turns)
    criteria = "\n".join(f'- "{k}" ({GROUP_CRITERIA[k]}): {GROUP_RUBRIC[k]}' for k in GROUP_CRITERIA)
    example = json.dumps({k: 3 for k in GROUP_CRITERIA})
    user = (f"Setting: {block.setting}\n" + (f"Situation: {block.context.situation}\n" if block.context.situation else "")
            + f"\nCompanions:\n{members}\n\nEarlier conversation:\n{context}\n\nBlock to judge:\n<<<\n{turns}\n>>>\n\n"
            f"Score the block from 1 to 5 (integers; 1 = very poor, 5 = excellent) on each criterion:\n{criteria}\n\n"
            f"Rubric version {GROUP_PROMPT_VERSION}. Answer with JSON only, exactly these keys, e.g. {example}")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def parse_group_verdict(raw: str) -> GroupVerdict:
    """The first JSON object of the answer with five integer scores 1-5; anything else is invalid."""
    obj, problem = answer_object(raw)
    if obj is None:
        return GroupVerdict.invalid(problem, raw)
    scores = {}
    for k, v in obj.items():
        key = re.sub(r"[\s\-&]+", "_", str(k).strip().lower())
        key = {"relevance_coherence": "relevance", "relevance_and_coherence": "relevance", "global_state_consistency": "consistency",
               "engagement_contribution": "engagement"}.get(key, key)
        if key in GROUP_CRITERIA:
            if isinstance(v, str) and v.strip().isdigit():
                v = int(v)
            if not isinstance(v, int) or isinstance(v, bool):
                return GroupVerdict.invalid(f"{key} = {v!r} is not an integer score", raw)
            scores[key] = v
    try:
        return GroupVerdict(check_group_scores(scores), True, raw=raw)
    except ValueError as exc:
        return GroupVerdict.invalid(str(exc), raw)


class LLMGroupJudge(LLMJudge, GroupJudge):
    """Group rubric over an OpenAI-compatible endpoint (cached, retried; see LLMJudge for the settings)."""

    name = "llm"
    verdict_cls = GroupVerdict

    def describe(self) -> str:
        return f"llm group judge ({self.model} at {self.base_url})"

    def messages_for(self, item: object) -> list[dict[str, str]]:
        return group_rubric_messages(item)  # type: ignore[arg-type]

    def parse(self, content: str) -> GroupVerdict:
        return parse_group_verdict(content)

    def score_blocks(self, blocks: list[GroupBlock]) -> list[GroupVerdict]:
        return self.score_prompts([self.messages_for(b) for b in blocks])  # type: ignore[return-value]
