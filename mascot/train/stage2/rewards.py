"""Stage-2 rewards for TRL's GRPOTrainer: the group reward of an N-turn rollout and the directive format
reward. TRL calls each as `f(prompts=..., completions=..., completion_ids=..., <dataset columns>,
trainer_state=..., log_extra=..., log_metric=...)` and expects one float (or None) per completion.

- `group`: the sampled directive is applied at the state's first director step, the dialogue is rolled
  forward `block_turns` turns through `GroupChat.step_batch` (frozen speakers, frozen rollout director,
  frozen simulated user keyed by rollout id), and the block's group-judge aggregate is mapped to 0..1.
  An undecodable or disallowed directive scores 0 (no rollout); a judge failure gives None (ignored).
- `format`: 1 if the completion is a parsable `{speaker, action, tone}` naming an allowed persona (or
  `none` when yielding is allowed) with a non-empty action and tone; 0.5 if only the speaker is decodable
  and allowed (what constrained decoding guarantees in the chat); else 0.
"""

from __future__ import annotations

import json
import logging
import math
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mascot.group.chat import GroupChat
from mascot.group.dialogue import Dialogue, Directive
from mascot.group.director import YIELD, Decision, Director, DirectorState
from mascot.group.personas import Persona
from mascot.group.prompts import DIRECTOR_PREFILL
from mascot.group.rollouts import Rollout, roll_forward
from mascot.judges.group import GroupBlock, GroupJudge
from mascot.simusers import SeekerScript, SimulatedUser

log = logging.getLogger(__name__)


@dataclass
class ParsedDirective:
    """A sampled completion read as a directive. `ok`: the speaker it names (the text before the first
    quote, exactly what the chat's constrained decoding chooses) is allowed in its state; `strict`: the
    whole completion is also a well-formed `{speaker, action, tone}` JSON object."""

    ok: bool
    speaker: str | None = None  # a persona name, or None for a yield
    action: str = ""
    tone: str = ""
    strict: bool = False
    problem: str = ""

    @property
    def yields(self) -> bool:
        return self.ok and self.speaker is None


def completion_json(completion: Any) -> str:
    from mascot.rewards.format import completion_text

    text = completion_text(completion)
    end = text.find("}")
    return DIRECTOR_PREFILL + (text[: end + 1] if end >= 0 else text)


def _field(raw: str, key: str) -> str:
    m = re.search(rf'"{key}"\s*:\s*"([^"]*)"', raw)
    return m.group(1).strip() if m else ""


def read_directive(completion: Any, state: Dialogue, roster: list[Persona], rules: Director) -> ParsedDirective:
    """Read a sampled completion (after the `{"speaker": "` prefill) and check it against the state."""
    raw = completion_json(completion)
    body = raw[len(DIRECTOR_PREFILL):]
    if '"' not in body:
        return ParsedDirective(False, problem="no closing quote after the speaker")
    name = body.split('"', 1)[0].strip()
    st = DirectorState(state, roster, 0)
    strict = False
    try:
        obj = json.loads(raw) if raw.rstrip().endswith("}") else None
        strict = isinstance(obj, dict) and isinstance(obj.get("speaker"), str)
    except json.JSONDecodeError:
        strict = False
    if name.lower() == YIELD:
        if not rules.may_yield(st):
            return ParsedDirective(False, problem="yield not allowed yet")
        return ParsedDirective(True, strict=strict)
    allowed = {p.name: p for p in rules.allowed(st)}
    if name not in allowed:
        return ParsedDirective(False, speaker=name, problem=f"{name[:40]!r} is not an allowed speaker here")
    action, tone = _field(raw, "action"), _field(raw, "tone")
    strict = strict and bool(action and tone)
    p = allowed[name]
    return ParsedDirective(True, name, action or p.default_action, tone or p.default_tone, strict)


@dataclass
class RewardEnv:
    """What the Stage-2 rewards close over: the frozen chat, simulated user, judge and scripts."""

    chat: GroupChat
    user: SimulatedUser
    judge: GroupJudge
    roster: list[Persona]
    rules: Director
    scripts: dict[str, SeekerScript]
    block_turns: int = 4
    setting: str = "emotional-support"
    repeat_penalty: float = 0.1
    calls: int = 0
    stats: dict[str, float] = field(default_factory=dict)


def make_group_reward(env: RewardEnv) -> Callable[..., list[float | None]]:
    def group_reward(completions: list[Any], state: list[str], script_id: list[str], state_id: list[str],
                     log_metric: Callable[[str, float], None] | None = None, **kwargs: Any) -> list[float | None]:
        env.calls += 1
        dialogues = [Dialogue.from_dict(json.loads(s)) for s in state]
        parsed = [read_directive(c, d, env.roster, env.rules) for c, d in zip(completions, dialogues)]
        rewards: list[float | None] = [0.0] * len(completions)
        rollouts: list[tuple[int, Rollout]] = []
        for i, (p, d, sid) in enumerate(zip(parsed, dialogues, script_id)):
            if not p.ok:
                log.info("stage2: undecodable directive scored 0 (%s)", p.problem)
                continue
            directive = Directive(p.speaker, p.action, p.tone) if p.speaker else None
            rid = f"{state_id[i]}#{env.calls}#{i}"
            # the same seed for every completion of a state: the block differs only by the directive
            seed = zlib.crc32(state_id[i].encode()) % 100_000
            rollouts.append((i, Rollout(rid, env.scripts[sid], d, seed=seed, first=Decision(directive, "sampled"))))
        if rollouts:
            roll_forward(env.chat, [r for _, r in rollouts], env.user, n_turns=env.block_turns)
            blocks = [GroupBlock(Dialogue(turns=r.dialogue.turns[: r.start], situation=r.dialogue.situation,
                                          emotion=r.dialogue.emotion), r.new_turns, env.roster, env.setting)
                      for _, r in rollouts]
            verdicts = env.judge.score_blocks(blocks)
            for (i, r), v in zip(rollouts, verdicts):
                env.user.forget(r.id)
                if not v.valid:
                    log.warning("stage2: group judge gave no verdict (%s); reward ignored", v.error)
                    rewards[i] = None
                    continue
                value = (v.aggregate - 1.0) / 4.0
                last = r.dialogue.turns[r.start - 1].speaker if r.start > 0 else None
                if parsed[i].speaker is not None and parsed[i].speaker == last:
                    value -= env.repeat_penalty
                rewards[i] = value
        valid = [r for r in rewards if r is not None]
        if log_metric is not None and parsed:
            log_metric("group/valid_directive_share", sum(p.ok for p in parsed) / len(parsed))
            log_metric("group/yield_share", sum(p.yields for p in parsed) / len(parsed))
            if rollouts:
                judged = [rewards[i] for i, _ in rollouts if rewards[i] is not None]
                if judged:
                    log_metric("group/block_score_mean", 4.0 * sum(judged) / len(judged) + 1.0)
        env.stats["last_mean"] = sum(valid) / len(valid) if valid else math.nan
        return rewards

    return group_reward


def make_format_reward(env: RewardEnv) -> Callable[..., list[float]]:
    def format_reward(completions: list[Any], state: list[str], **kwargs: Any) -> list[float]:
        out = []
        for c, s in zip(completions, state):
            p = read_directive(c, Dialogue.from_dict(json.loads(s)), env.roster, env.rules)
            out.append(1.0 if p.strict else 0.5 if p.ok else 0.0)
        return out

    return format_reward


STAGE2_REWARDS = {"group": make_group_reward, "format": make_format_reward}
