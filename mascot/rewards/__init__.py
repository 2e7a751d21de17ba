"""Reward registry for GRPO: name -> factory building a TRL reward `f(completions, **kwargs) -> list[float]`.

Dataset columns reach the functions as keyword arguments (`persona`, `rm_prompt`, `context`). TRL logs
each function separately (`rewards/<__name__>/mean`) and combines them with `reward_weights`.

    funcs = get_reward_funcs(["persona_rm", "format"], RewardContext(personas=..., roster=..., reward_model=rm))
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mascot.errors import ConfigError, unknown_name
from mascot.personas import Persona
from mascot.rewards.format import FormatChecker, completion_text, make_format_reward
from mascot.rewards.persona_rm import PersonaRewardModel, group_zscore, make_persona_rm_reward, rm_prompt

# A GRPO reward function (TRL's contract): completions plus dataset columns as kwargs -> one float each.
RewardFunc = Callable[..., list[float]]


@dataclass
class RewardContext:
    """What reward factories may close over."""

    personas: list[Persona]
    roster: list[Persona]
    min_words: int = 15
    max_words: int = 150
    reward_model: Any = None  # PersonaRewardModel or EmbeddingRewardModel (anything with score_texts)
    judge: Any = None  # a mascot.judges Judge, for the optional direct-judge reward
    setting: str = ""
    format_graded: bool = False  # length-aware format reward (see make_format_reward)
    rm_norm: str = "group"  # persona_rm scaling: group z-score (paper) or global (RM's training-score mean/std)
    extra: dict[str, Any] = field(default_factory=dict)


def _persona_rm(ctx: RewardContext) -> RewardFunc:
    if ctx.reward_model is None:
        raise ConfigError("The 'persona_rm' reward needs a trained reward model: run the reward_model step first.")
    return make_persona_rm_reward(ctx.reward_model, ctx.personas, ctx.roster, norm=ctx.rm_norm)


def _format(ctx: RewardContext) -> RewardFunc:
    names = [p.name for p in ctx.roster]
    aliases = {p.name: [*p.aliases, p.role] for p in ctx.roster}
    return make_format_reward(names, ctx.min_words, ctx.max_words, aliases, graded=ctx.format_graded)


def _replies(ctx: RewardContext) -> Callable[[list[Any], list[str], list[str]], list[tuple[Persona, Any, str]]]:
    """(persona, dialogue before the reply, cleaned reply) for each completion of a GRPO batch: what the
    judge and mood rewards read, from TRL's completions and the `persona` and `context` dataset columns."""
    from mascot.dialogue import Dialogue
    from mascot.speaker import clean_reply

    by_name = {p.name: p for p in ctx.personas}

    def read(completions: list[Any], persona: list[str], context: list[str]) -> list[tuple[Persona, Any, str]]:
        return [(by_name[name], Dialogue.from_dict(json.loads(ctx_json)),
                 clean_reply(completion_text(c), by_name[name], ctx.roster))
                for c, name, ctx_json in zip(completions, persona, context)]

    return read


def _judge_signal(ctx: RewardContext, name: str, criterion: str | None) -> RewardFunc:
    """Reward `name`: the judge's aggregate (`criterion` None) or one criterion (1-5), z-scored within each group
    like `persona_rm`; invalid verdicts give None (ignored by TRL); the raw mean is logged as `<name>/raw_mean`
    and TRL logs the component as `rewards/<name>_reward/mean`."""
    if ctx.judge is None:
        raise ConfigError(f"The {name!r} reward needs a judge (set `judge:` in the recipe).")
    from mascot.judges import JudgeItem

    replies = _replies(ctx)

    def reward(completions: list[Any], persona: list[str], context: list[str],
               log_metric: Callable[[str, float], None] | None = None, **kwargs: Any) -> list[float | None]:
        items = [JudgeItem(p, ctx.roster, dialogue, text, ctx.setting)
                 for p, dialogue, text in replies(completions, persona, context)]
        raw = [(v.aggregate if criterion is None else v.scores.get(criterion, math.nan)) if v.valid else math.nan
               for v in ctx.judge.score_batch(items)]
        valid = [r for r in raw if not math.isnan(r)]
        if log_metric is not None and valid:
            log_metric(f"{name}/raw_mean", sum(valid) / len(valid))
        keys = [f"{n}\n{c}" for n, c in zip(persona, context)]
        return [None if math.isnan(z) else z for z in group_zscore(raw, keys)]

    reward.__name__ = f"{name}_reward"
    return reward


# The rewards that score a reply with the judge (`_judge_signal`): name -> the criterion read, None = the aggregate.
# - judge: the aggregate (RLAIF without the reward-model distillation: useful when the RM is data-starved);
# - relevance: a reward of its own for a recipe that weights answering the user's latest message above the rest;
# - consistency: persona fit against the other personas and a generic assistant, for a persona whose replies fit
#   its profile no better than the prompted model's.
JUDGE_SIGNALS: dict[str, str | None] = {"judge": None, "relevance": "relevance", "consistency": "consistency"}
# the rewards that need RewardContext.judge (the GRPO step loads the judge when a recipe names one)
JUDGE_REWARDS = frozenset(JUDGE_SIGNALS)


def _judge_reward(name: str) -> Callable[[RewardContext], RewardFunc]:
    return lambda ctx: _judge_signal(ctx, name, JUDGE_SIGNALS[name])


def _mood(ctx: RewardContext) -> RewardFunc:
    """-1 for a reply that celebrates ("How wonderful!") a message of loss, failure or distress (a negative
    emotion label, or a distress word when there is none: `mascot.judges.mood`), else 0. Its own component,
    so the log shows the celebrating replies going away (`rewards/mood_reward/mean` rising toward 0)."""
    from mascot.judges.mood import mood_mismatch

    replies = _replies(ctx)

    def mood_reward(completions: list[Any], persona: list[str], context: list[str], **kwargs: Any) -> list[float]:
        return [-float(mood_mismatch(dialogue, text)) for _, dialogue, text in replies(completions, persona, context)]

    return mood_reward


REWARDS: dict[str, Callable[[RewardContext], RewardFunc]] = {
    "persona_rm": _persona_rm,
    "format": _format,
    **{name: _judge_reward(name) for name in JUDGE_SIGNALS},
    "mood": _mood,
}


def get_reward_funcs(names: list[str], ctx: RewardContext) -> list[RewardFunc]:
    """Build the reward functions named in a recipe, in order; unknown names list the valid ones."""
    funcs = []
    for name in names:
        if name not in REWARDS:
            raise unknown_name("reward", name, list(REWARDS))
        funcs.append(REWARDS[name](ctx))
    return funcs


__all__ = ["JUDGE_REWARDS", "REWARDS", "FormatChecker", "PersonaRewardModel", "RewardContext", "RewardFunc", "completion_text",
           "get_reward_funcs", "group_zscore", "make_format_reward", "make_persona_rm_reward", "rm_prompt"]
