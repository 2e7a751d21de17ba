"""Stage-1 data: training contexts, K candidates per (context, persona), judging, and the datasets
handed to TRL. Prompts are built with `mascot.group.prompts.speaker_messages`, the exact prompt the chat uses,
and each candidate is cleaned with `mascot.group.cleaning.finalize_reply`, as the chat cleans a draw.

A *group* is one (context, persona) with its K candidates; `candidates.jsonl` holds one group per line:
`{group_id, scenario_id, split, persona, context (Dialogue dict), directive, candidates, raw}`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from mascot.backends.base import Backend, GenerationParams
from mascot.errors import ConfigError
from mascot.group.cleaning import finalize_reply, trim_to_sentence
from mascot.group.dialogue import Dialogue, Directive, Turn
from mascot.group.personas import Persona
from mascot.group.prompts import speaker_messages
from mascot.rewards.persona_rm import rm_prompt

STOP = ("\n\n", "\nUser:")  # the chat speaker's stop strings


def default_directive(p: Persona) -> Directive:
    """The directive a persona gets when the director falls back to its defaults."""
    return Directive(p.name, p.default_action, p.default_tone)


def select_contexts(scenarios: Sequence[Any], max_contexts: int | None, seed: int) -> list[Any]:
    """A seeded, reproducible subset of scenarios (all when max_contexts is None)."""
    items = list(scenarios)
    random.Random(seed).shuffle(items)
    return items[:max_contexts] if max_contexts else items


def assign_rm_eval(scenario_ids: Sequence[str], fraction: float, seed: int) -> set[str]:
    """Scenario ids held out to measure reward-model pair accuracy (whole contexts, never split)."""
    ids = sorted(set(scenario_ids))
    random.Random(seed + 1).shuffle(ids)
    n = int(round(len(ids) * fraction))
    if fraction > 0 and len(ids) >= 4:
        n = max(n, 1)
    return set(ids[:n])


def generate_candidates(
    backend: Backend,
    scenarios: Sequence[Any],
    personas: Sequence[Persona],
    roster: Sequence[Persona],
    *,
    k: int,
    params: GenerationParams,
    batch_size: int,
    context_mode: str = "round",
    rm_eval_ids: set[str] | None = None,
    done: dict[str, dict[str, Any]] | None = None,
    on_group: Callable[[dict[str, Any]], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """K candidates per (scenario, persona) through the shared backend, batched.

    With `context_mode="round"` personas answer in roster order and each later persona's context holds
    the earlier personas' first usable candidate, like one chat round; with "opening" every persona
    answers the scenario alone. `done` (group_id -> group) resumes a half-finished run; `on_group` is
    called as each group completes (to append it to a partial file) and `on_batch` with the number of
    candidates generated (progress bars).
    """
    done = dict(done or {})
    rm_eval_ids = rm_eval_ids or set()
    dialogues = {s.id: s.to_dialogue() for s in scenarios}
    out: dict[str, dict[str, Any]] = {}
    per_batch = max(1, batch_size // k)  # whole groups per backend call
    for p_idx, persona in enumerate(personas):
        pending: list[tuple[Any, Dialogue, Directive]] = []
        for s in scenarios:
            gid = f"{s.id}:{persona.key}"
            if gid in done:
                out[gid] = done[gid]
                continue
            dialogue = Dialogue.from_dict(dialogues[s.id].to_dict())
            if context_mode == "round":
                for earlier in personas[:p_idx]:
                    prev = out.get(f"{s.id}:{earlier.key}")
                    text = next((c for c in (prev or {}).get("candidates", []) if c.strip()), "")
                    if text:
                        dialogue.add(Turn(earlier.name, text, default_directive(earlier)))
            pending.append((s, dialogue, default_directive(persona)))
        for start in range(0, len(pending), per_batch):
            chunk = pending[start : start + per_batch]
            chats = [speaker_messages(persona, list(roster), d, directive) for _, d, directive in chunk]
            batch = [c for c in chats for _ in range(k)]
            completions = backend.generate(batch, params.with_(seed=seed + p_idx * 100_003 + start), adapter=None)
            for g, (s, d, directive) in enumerate(chunk):
                raw = [c.text for c in completions[g * k : (g + 1) * k]]
                group = {
                    "group_id": f"{s.id}:{persona.key}",
                    "scenario_id": s.id,
                    "split": "rm_eval" if s.id in rm_eval_ids else "train",
                    "persona": persona.name,
                    "context": d.to_dict(),
                    "directive": asdict(directive),
                    "candidates": [finalize_reply(t, persona, list(roster)) for t in raw],  # as the chat shows a draw
                    "raw": raw,
                }
                out[group["group_id"]] = group
                if on_group:
                    on_group(group)
            if on_batch:
                on_batch(len(batch))
    order = [f"{s.id}:{p.key}" for p in personas for s in scenarios]
    return [out[g] for g in order if g in out]


def judge_groups(judge: Any, groups: Sequence[dict[str, Any]], personas_by_name: dict[str, Persona],
                 roster: Sequence[Persona], setting: str, batch_size: int,
                 on_batch: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Score every candidate; returns groups with `scores` (aggregate, None if invalid) and `verdicts`."""
    from mascot.judges import JudgeItem

    flat: list[tuple[int, int, Any]] = []
    for gi, g in enumerate(groups):
        persona = personas_by_name[g["persona"]]
        dialogue = Dialogue.from_dict(g["context"])
        for ci, text in enumerate(g["candidates"]):
            flat.append((gi, ci, JudgeItem(persona, list(roster), dialogue, text, setting)))
    results: dict[tuple[int, int], Any] = {}
    for start in range(0, len(flat), batch_size):
        chunk = flat[start : start + batch_size]
        verdicts = judge.score_batch([item for _, _, item in chunk])
        for (gi, ci, _), v in zip(chunk, verdicts):
            results[(gi, ci)] = v
        if on_batch:
            on_batch(len(chunk))
    judged = []
    for gi, g in enumerate(groups):
        verdicts = [results[(gi, ci)] for ci in range(len(g["candidates"]))]
        judged.append({
            **{k: g[k] for k in ("group_id", "scenario_id", "split", "persona", "candidates")},
            "scores": [round(v.aggregate, 4) if v.valid else None for v in verdicts],
            "criteria": [v.scores if v.valid else None for v in verdicts],
            "errors": [v.error for v in verdicts if not v.valid],
        })
    return judged


def with_rm_prompts(judged: Sequence[dict[str, Any]], groups: Sequence[dict[str, Any]],
                    personas_by_name: dict[str, Persona]) -> list[dict[str, Any]]:
    """Attach the reward-model prompt (persona + context) to each judged group."""
    ctx = {g["group_id"]: g["context"] for g in groups}
    return [{**j, "rm_prompt": rm_prompt(personas_by_name[j["persona"]], Dialogue.from_dict(ctx[j["group_id"]]))}
            for j in judged]


def grpo_rows(groups: Sequence[dict[str, Any]], personas_by_name: dict[str, Persona], roster: Sequence[Persona],
              persona: str | None = None, max_prompts: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """GRPO prompt rows (conversational `prompt` from speaker_messages) plus the reward columns."""
    rows = []
    for g in groups:
        if persona is not None and g["persona"] != persona:
            continue
        p = personas_by_name[g["persona"]]
        dialogue = Dialogue.from_dict(g["context"])
        directive = Directive(**g["directive"]) if g.get("directive") else None
        rows.append({
            "prompt": speaker_messages(p, list(roster), dialogue, directive),
            "persona": p.name,
            "rm_prompt": rm_prompt(p, dialogue),
            "context": json.dumps(g["context"], ensure_ascii=False),
        })
    random.Random(seed).shuffle(rows)
    return rows[:max_prompts] if max_prompts else rows


def rank_score(aggregate: float, criteria: dict[str, float] | None, criterion: str | None = None,
               weights: dict[str, float] | None = None) -> float:
    """A candidate's warm-start ranking score: one criterion, a weighted mean of criteria, or the aggregate."""
    if weights and criteria:
        unknown = sorted(set(weights) - set(criteria))
        if unknown:
            raise ConfigError(f"sft_rank_weights names {unknown}, which the judge does not score; valid: {sorted(criteria)}.")
        total = sum(weights.values())
        return sum(w * criteria[k] for k, w in weights.items()) / total if total > 0 else aggregate
    if criterion and criteria:
        return criteria.get(criterion, aggregate)
    return aggregate


def sft_rows(groups: Sequence[dict[str, Any]], judged: Sequence[dict[str, Any]], personas_by_name: dict[str, Persona],
             roster: Sequence[Persona], persona: str | None = None, min_score: float = 0.0,
             criterion: str | None = None, trim: bool = False, max_examples: int | None = None,
             weights: dict[str, float] | None = None, max_words: int | None = None) -> list[dict[str, Any]]:
    """Warm-start examples: per group (context), the best-judged non-empty candidate in prompt-completion
    format with the same speaker prompt as GRPO and the chat. Ranked by the aggregate, by one criterion
    (ties broken by the aggregate), or by a weighted mean of the criteria (`weights`, e.g. relevance counted
    twice so that best-of-K targets do not trade the user's topic for persona phrasing); groups whose best
    ranking score is below `min_score` are skipped.
    With `trim`, targets cut off by the token budget are trimmed to their last finished sentence, so the
    adapter learns to end its message (the chat template's end-of-turn token follows the target). With
    `max_words`, the best-ranked candidate of at most that many words (after trimming) is the target when the
    context has one (else the best overall), so the warm start does not teach replies that fill the budget."""
    scores = {j["group_id"]: j for j in judged}
    rows = []
    for g in groups:
        if (persona is not None and g["persona"] != persona) or g["group_id"] not in scores:
            continue
        j = scores[g["group_id"]]
        crit = j.get("criteria") or [None] * len(j["scores"])
        ranked = sorted(((rank_score(s, c, criterion, weights), s, trim_to_sentence(t) if trim else t)
                         for s, c, t in zip(j["scores"], crit, j["candidates"]) if s is not None and t.strip()),
                        key=lambda x: (x[0], x[1]), reverse=True)
        if max_words is not None:
            short = [r for r in ranked if len(r[2].split()) <= max_words]
            ranked = short or ranked
        if not ranked or ranked[0][0] < min_score:
            continue
        p = personas_by_name[g["persona"]]
        directive = Directive(**g["directive"]) if g.get("directive") else None
        rows.append({"prompt": speaker_messages(p, list(roster), Dialogue.from_dict(g["context"]), directive),
                     "completion": [{"role": "assistant", "content": ranked[0][2]}],
                     "score": ranked[0][1], "rank": ranked[0][0]})
    if max_examples is not None and len(rows) > max_examples:  # the best-ranked targets (stable order)
        keep = set(sorted(range(len(rows)), key=lambda i: (-rows[i]["rank"], -rows[i]["score"], i))[:max_examples])
        rows = [r for i, r in enumerate(rows) if i in keep]
    return rows
