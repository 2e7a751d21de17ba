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
from mascot.group.personas import Persona
from mascot.rewards.format import FormatChecker, cap_words, completion_text, count_words, make_format_reward
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
    max_completion_tokens: int | None = None  # GRPO's token budget (the overlong reward's L_max)
    overlong_buffer: int = 12  # the overlong reward's soft zone: its last `overlong_buffer` tokens
    score_max_words: int | None = None  # the rewards that read a reply read its first this-many words (None: all)
    # length-controlled judge rewards: (persona name, criterion or "aggregate") -> judge points per word, taken off
    # before the group z-score (`length_slopes`); empty: no length control
    judge_length_slopes: dict[tuple[str, str], float] = field(default_factory=dict)
    # length-controlled persona_rm: persona name -> (RM points per word, mean words of its candidates); empty: none
    rm_length_slopes: dict[str, tuple[float, float]] = field(default_factory=dict)
    acceptability: Any = None  # an AcceptabilityScorer for the 'acceptability' reward (None: the shipped one)
    extra: dict[str, Any] = field(default_factory=dict)


def _persona_rm(ctx: RewardContext) -> RewardFunc:
    if ctx.reward_model is None:
        raise ConfigError("The 'persona_rm' reward needs a trained reward model: run the reward_model step first.")
    return make_persona_rm_reward(ctx.reward_model, ctx.personas, ctx.roster, norm=ctx.rm_norm,
                                  max_words=ctx.score_max_words, length_slopes=ctx.rm_length_slopes)


def _format(ctx: RewardContext) -> RewardFunc:
    names = [p.name for p in ctx.roster]
    aliases = {p.name: [*p.aliases, p.role] for p in ctx.roster}
    return make_format_reward(names, ctx.min_words, ctx.max_words, aliases, graded=ctx.format_graded)


def _replies(ctx: RewardContext) -> Callable[[list[Any], list[str], list[str]], list[tuple[Persona, Any, str]]]:
    """(persona, dialogue before the reply, cleaned reply) for each completion of a GRPO batch: what the
    judge and mood rewards read, from TRL's completions and the `persona` and `context` dataset columns; with
    `score_max_words`, only the reply's first words (`cap_words`), so length past the format band earns nothing."""
    from mascot.group.cleaning import clean_reply
    from mascot.group.dialogue import Dialogue

    by_name = {p.name: p for p in ctx.personas}

    def read(completions: list[Any], persona: list[str], context: list[str]) -> list[tuple[Persona, Any, str]]:
        return [(by_name[name], Dialogue.from_dict(json.loads(ctx_json)),
                 cap_words(clean_reply(completion_text(c), by_name[name], ctx.roster), ctx.score_max_words))
                for c, name, ctx_json in zip(completions, persona, context)]

    return read


def _judge_signal(ctx: RewardContext, name: str, criterion: str | tuple[str, ...] | None) -> RewardFunc:
    """Reward `name`: the judge's aggregate (`criterion` None) or one criterion (1-5), z-scored within each group
    like `persona_rm`; with a tuple of criteria, each is z-scored within the group and the reward is their minimum
    (a reply ranks high only if it is good on all of them, so one cannot be traded for another). Invalid verdicts
    give None (ignored by TRL); the raw mean is logged as `<name>/raw_mean` (per criterion for a tuple:
    `<name>/<criterion>_raw_mean`) and TRL logs the component as `rewards/<name>_reward/mean`."""
    if ctx.judge is None:
        raise ConfigError(f"The {name!r} reward needs a judge (set `judge:` in the recipe).")
    from mascot.judges import JudgeItem

    replies = _replies(ctx)
    criteria = signal_criteria(criterion)

    def reward(completions: list[Any], persona: list[str], context: list[str],
               log_metric: Callable[[str, float], None] | None = None, **kwargs: Any) -> list[float | None]:
        items = [JudgeItem(p, ctx.roster, dialogue, text, ctx.setting)
                 for p, dialogue, text in replies(completions, persona, context)]
        verdicts = ctx.judge.score_batch(items)
        keys = [f"{n}\n{c}" for n, c in zip(persona, context)]
        zs: list[list[float]] = []
        for crit in criteria:
            raw = [(v.aggregate if crit is None else v.scores.get(crit, math.nan)) if v.valid else math.nan
                   for v in verdicts]
            valid = [r for r in raw if not math.isnan(r)]
            if log_metric is not None and valid:
                log_metric(f"{name}/{crit}_raw_mean" if len(criteria) > 1 else f"{name}/raw_mean",
                           sum(valid) / len(valid))
            if ctx.judge_length_slopes:  # the group z-score below removes the group mean, so only the slope matters
                key = crit or "aggregate"
                raw = [r - ctx.judge_length_slopes.get((item.persona.name, key), 0.0) * count_words(item.response)
                       for r, item in zip(raw, items)]
            zs.append(group_zscore(raw, keys))
        # a reply missing any criterion gets None (Python's min would keep or drop a NaN depending on its position)
        return [None if any(math.isnan(z) for z in col) else min(col) for col in zip(*zs)]

    reward.__name__ = f"{name}_reward"
    return reward


def mean_words(judged: list[dict[str, Any]]) -> dict[str, float]:
    """Mean word count of each persona's judged candidates (the length a length-controlled reward centres on)."""
    totals: dict[str, list[int]] = {}
    for row in judged:
        acc = totals.setdefault(row["persona"], [0, 0])
        acc[0] += sum(count_words(c) for c in row["candidates"])
        acc[1] += len(row["candidates"])
    return {p: round(w / n, 3) for p, (w, n) in totals.items() if n}


def length_slopes(judged: list[dict[str, Any]], criteria: list[str]) -> dict[tuple[str, str], float]:
    """How many judge points one more word earns, per persona and criterion ("aggregate" for the judge's score), from
    the judged candidates: the pooled within-group least-squares slope of score on word count (each group is one
    context's K candidates, so context difficulty drops out). A length-controlled judge reward subtracts
    slope x words, so a longer reply wins only by being better, not by being longer (as length-controlled
    AlpacaEval does for a judge that likes length).

        >>> rows = [{"persona": "A", "candidates": ["a b", "a b c d"], "scores": [1.0, 2.0], "criteria": [{}, {}]}]
        >>> length_slopes(rows, ["aggregate"])
        {('A', 'aggregate'): 0.5}
    """
    sums: dict[tuple[str, str], list[float]] = {}
    for row in judged:
        words = [count_words(c) for c in row["candidates"]]
        for crit in criteria:
            ys = row["scores"] if crit == "aggregate" else [(c or {}).get(crit) for c in row.get("criteria", [])]
            pts = [(x, y) for x, y in zip(words, ys) if y is not None and not math.isnan(y)]
            if len(pts) < 2:
                continue
            mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
            acc = sums.setdefault((row["persona"], crit), [0.0, 0.0])
            acc[0] += sum((x - mx) * (y - my) for x, y in pts)
            acc[1] += sum((x - mx) ** 2 for x, _ in pts)
    return {key: round(sxy / sxx, 6) for key, (sxy, sxx) in sums.items() if sxx > 0}


# The rewards that score a reply with the judge (`_judge_signal`): name -> the criterion read, None = the aggregate.
# - judge: the aggregate (RLAIF without the reward-model distillation: useful when the RM is data-starved);
# - relevance: a reward of its own for a recipe that weights answering the user's latest message above the rest;
# - consistency: persona fit against the other personas and a generic assistant, for a persona whose replies fit
#   its profile no better than the prompted model's;
# - balanced: the lower of a reply's group z-scores on relevance and consistency, so GRPO cannot buy one with the
#   other (weighted sums of the two only traded one for the other along one frontier: docs/training.md).
JUDGE_SIGNALS: dict[str, str | tuple[str, ...] | None] = {
    "judge": None, "relevance": "relevance", "consistency": "consistency", "balanced": ("relevance", "consistency")}


def signal_criteria(criterion: str | tuple[str, ...] | None) -> tuple[str | None, ...]:
    """The judge criteria a `JUDGE_SIGNALS` entry reads, as a tuple (None = the aggregate).

        >>> signal_criteria(JUDGE_SIGNALS["balanced"]), signal_criteria(JUDGE_SIGNALS["judge"])
        (('relevance', 'consistency'), (None,))
    """
    return criterion if isinstance(criterion, tuple) else (criterion,)


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


def _acceptability(ctx: RewardContext) -> RewardFunc:
    """How likely a person would accept the reply (`mascot.acceptability`: the scorer validated on held-out human-style
    labels), z-scored within each group like `persona_rm`; the raw mean is logged as `acceptability/raw_mean`."""
    from mascot.acceptability.scorer import AcceptabilityScorer

    scorer = ctx.acceptability or AcceptabilityScorer.load()
    replies = _replies(ctx)

    def acceptability_reward(completions: list[Any], persona: list[str], context: list[str],
                             log_metric: Callable[[str, float], None] | None = None, **kwargs: Any) -> list[float]:
        read = replies(completions, persona, context)
        raw = [s.acceptability for s in scorer.score_many([(d, p.name, text) for p, d, text in read])]
        if log_metric is not None and raw:
            log_metric("acceptability/raw_mean", sum(raw) / len(raw))
        return group_zscore(raw, [f"{n}\n{c}" for n, c in zip(persona, context)])

    return acceptability_reward


def overlong_penalty(length: int, max_tokens: int, buffer: int) -> float:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13): 0 up to `max_tokens - buffer` tokens, then
    linearly down to -1 at the budget, where the reply is cut off.

        >>> [overlong_penalty(n, 48, 12) for n in (20, 36, 42, 48)]
        [0.0, 0.0, -0.5, -1.0]
    """
    soft_start = max_tokens - buffer
    if length <= soft_start:
        return 0.0
    if length >= max_tokens:
        return -1.0
    return round((soft_start - length) / buffer, 4)


def _overlong(ctx: RewardContext) -> RewardFunc:
    """The overlong reward, on each completion's token count (TRL's `completion_ids`). The graded format reward only
    sees a reply once it is cut off; this one pushes back while the reply still fits, so lengths move away from
    the budget before they reach it."""
    if not ctx.max_completion_tokens or ctx.max_completion_tokens < 2:
        raise ConfigError(f"The 'overlong' reward needs GRPO's token budget (grpo.max_completion_length), got "
                          f"{ctx.max_completion_tokens!r}.")
    if not 0 < ctx.overlong_buffer < ctx.max_completion_tokens:
        raise ConfigError(f"overlong_buffer={ctx.overlong_buffer} must be between 1 and grpo.max_completion_length - 1 "
                          f"({ctx.max_completion_tokens - 1}).")
    max_tokens, buffer = ctx.max_completion_tokens, ctx.overlong_buffer

    def overlong_reward(completions: list[Any], completion_ids: list[list[int]] | None = None,
                        **kwargs: Any) -> list[float]:
        if completion_ids is None:
            raise ValueError("overlong_reward needs the completions' token ids (TRL passes `completion_ids`).")
        return [overlong_penalty(len(ids), max_tokens, buffer) for ids in completion_ids]

    return overlong_reward


REWARDS: dict[str, Callable[[RewardContext], RewardFunc]] = {
    "persona_rm": _persona_rm,
    "format": _format,
    **{name: _judge_reward(name) for name in JUDGE_SIGNALS},
    "mood": _mood,
    "overlong": _overlong,
    "acceptability": _acceptability,
}


def check_reward_names(names: list[str]) -> None:
    """Raise for the first name not in the registry, listing the valid ones (recipes call it when they load)."""
    for name in names:
        if name not in REWARDS:
            raise unknown_name("reward", name, list(REWARDS))


def get_reward_funcs(names: list[str], ctx: RewardContext) -> list[RewardFunc]:
    """Build the reward functions named in a recipe, in order; unknown names list the valid ones."""
    check_reward_names(names)
    return [REWARDS[name](ctx) for name in names]


__all__ = ["JUDGE_REWARDS", "JUDGE_SIGNALS", "REWARDS", "FormatChecker", "check_reward_names", "PersonaRewardModel", "RewardContext", "RewardFunc", "completion_text",
           "get_reward_funcs", "group_zscore", "make_format_reward", "make_persona_rm_reward", "rm_prompt", "signal_criteria"]
