"""Stage 1's data steps and reward model: generate -> judge -> pairs -> reward_model.

Each step reads the previous step's file under `<output>/work/` and writes its own; `mascot.train.stage1.pipeline`
runs them in order, records them in the manifest and skips finished ones.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mascot.errors import ConfigError
from mascot.files.checkpoints import reward_model_dir
from mascot.train.progress import read_jsonl, read_progress, write_jsonl

if TYPE_CHECKING:
    from mascot.train.stage1.pipeline import Run


def step_generate(run: Run) -> dict[str, Any]:
    from mascot.backends import load_backend
    from mascot.backends.base import GenerationParams
    from mascot.data import load_scenarios
    from mascot.train.stage1.data import STOP, assign_rm_eval, generate_candidates, select_contexts

    cfg = run.cfg
    scenarios = [s for s in load_scenarios(cfg.scenarios, split=cfg.train_split) if s.setting == run.pack.setting]
    if not scenarios:
        raise ConfigError(f"No {cfg.train_split!r} scenarios of setting {run.pack.setting!r} in {cfg.scenarios!r}.")
    scenarios = select_contexts(scenarios, cfg.max_contexts, cfg.seed)
    rm_eval = assign_rm_eval([s.id for s in scenarios], cfg.rm_eval_fraction, cfg.seed)
    partial = run.work / "candidates.partial.jsonl"
    # a run killed mid-write leaves at most one broken last line: read_progress skips it
    done = {g["group_id"]: g for g in read_progress(partial) if "group_id" in g}
    # a resumed run may hold out other contexts (changed max_contexts / rm_eval_fraction): re-split, by scenario
    done = {gid: {**g, "split": "rm_eval" if g["scenario_id"] in rm_eval else "train"} for gid, g in done.items()}
    if partial.exists():
        write_jsonl(partial, list(done.values()))  # drop a broken line before appending after it
    backend = load_backend(cfg.backend, model=cfg.model, dtype=cfg.dtype)
    params = GenerationParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                              repetition_penalty=cfg.repetition_penalty, stop=STOP)
    total = len(scenarios) * len(run.personas) * cfg.k
    bar = run.bar(total, "generate")
    bar.update(len(done) * cfg.k)
    t0 = time.time()
    on_batch = _reporter(run, "generate", bar, total, done=len(done) * cfg.k)
    partial.parent.mkdir(parents=True, exist_ok=True)
    with partial.open("a", encoding="utf-8") as f:
        def on_group(g: dict[str, Any]) -> None:
            f.write(json.dumps(g, ensure_ascii=False) + "\n")
            f.flush()

        groups = generate_candidates(backend, scenarios, run.personas, run.roster, k=cfg.k, params=params,
                                     batch_size=cfg.gen_batch_size, context_mode=cfg.context_mode,
                                     rm_eval_ids=rm_eval, done=done, on_group=on_group, on_batch=on_batch, seed=cfg.seed)
    bar.close()
    write_jsonl(run.work / "candidates.jsonl", groups)
    partial.unlink(missing_ok=True)
    seconds = time.time() - t0
    new = total - len(done) * cfg.k
    empty = sum(1 for g in groups for c in g["candidates"] if not c.strip())
    return {"scenarios": cfg.scenarios, "contexts": len(scenarios), "rm_eval_contexts": len(rm_eval),
            "groups": len(groups), "candidates": total, "empty_candidates": empty,
            "candidates_per_second": round(new / seconds, 2) if seconds > 0 and new else None}


def step_judge(run: Run) -> dict[str, Any]:
    from mascot.judges import load_judge
    from mascot.train.stage1.data import judge_groups, with_rm_prompts

    cfg = run.cfg
    groups = read_jsonl(run.need("generate", "candidates.jsonl"))
    judge = load_judge(cfg.judge, **cfg.judge_kwargs)
    total = sum(len(g["candidates"]) for g in groups)
    bar = run.bar(total, f"judge ({cfg.judge})")
    on_batch = _reporter(run, "judge", bar, total)
    judged = judge_groups(judge, groups, run.by_name, run.roster, run.pack.setting, cfg.judge_batch_size, on_batch)
    bar.close()
    judged = with_rm_prompts(judged, groups, run.by_name)
    write_jsonl(run.work / "judged.jsonl", judged)
    scores = [s for g in judged for s in g["scores"] if s is not None]
    invalid = sum(1 for g in judged for s in g["scores"] if s is None)
    per_persona = {}
    for p in run.personas:
        vals = [s for g in judged if g["persona"] == p.name for s in g["scores"] if s is not None]
        per_persona[p.name] = round(sum(vals) / len(vals), 3) if vals else None
    describe = getattr(judge, "describe", lambda: cfg.judge)()
    return {"judge": describe, "scored": len(scores), "invalid": invalid,
            "mean_aggregate": round(sum(scores) / len(scores), 3) if scores else None,
            "mean_aggregate_by_persona": per_persona}


def with_acceptability(judged: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each judged group with the acceptability scorer's rating of every candidate (`acceptability`)."""
    from mascot.acceptability.scorer import AcceptabilityScorer
    from mascot.group.dialogue import Dialogue

    scorer = AcceptabilityScorer.load()
    out = []
    for g in judged:
        d = Dialogue.from_dict(g["context"])
        out.append({**g, "acceptability": [s.acceptability for s in scorer.score(d, g["persona"], g["candidates"])]})
    return out


def step_pairs(run: Run) -> dict[str, Any]:
    from mascot.train.stage1.pairs import build_pairs, cross_persona_pairs, load_extra_pairs

    cfg = run.cfg
    judged = read_jsonl(run.need("judge", "judged.jsonl"))
    if cfg.pair_min_acceptability is not None:
        judged = with_acceptability(judged)
    pairs, stats = build_pairs(judged, cfg.delta, cfg.max_pairs_per_group, cfg.pair_criteria, cfg.pair_max_length_ratio,
                               cfg.pair_min_acceptability)
    cross = cross_persona_pairs(judged, cfg.cross_persona_pairs, rejected_per_persona=cfg.cross_persona_rejected) \
        if cfg.cross_persona_pairs else []
    cross_all = len(cross)
    if cross and cfg.cross_persona_margin is not None:
        cross = _judge_cross_pairs(run, cross)
    extra = [row for path in cfg.extra_pairs for row in load_extra_pairs(path)]
    write_jsonl(run.work / "pairs.jsonl", pairs + cross + extra)
    by_split = {s: sum(1 for p in pairs + cross if p["split"] == s) for s in ("train", "rm_eval")}
    by_source = {src: {s: sum(1 for p in rows if p["split"] == s) for s in ("train", "rm_eval")}
                 for src, rows in (("judge", pairs), ("cross_persona", cross))}
    return {**stats.as_dict(), "judge_pairs": len(pairs), "cross_persona_pairs": len(cross),
            "cross_persona_candidates": cross_all, "cross_persona_margin": cfg.cross_persona_margin, "delta": cfg.delta,
            "pair_criteria": list(cfg.pair_criteria), "extra_pairs": len(extra), "by_split": by_split,
            "by_source": by_source}


def _judge_cross_pairs(run: Run, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Judge each cross-persona negative *as the persona it is rejected for* (same context), then keep the
    pairs whose consistency margin reaches `cross_persona_margin`."""
    from mascot.group.dialogue import Dialogue
    from mascot.judges import JudgeItem, load_judge
    from mascot.train.stage1.pairs import keep_persona_separated

    cfg = run.cfg
    contexts = {g["group_id"]: g["context"] for g in read_jsonl(run.need("generate", "candidates.jsonl"))}
    judge = load_judge(cfg.judge, **cfg.judge_kwargs)
    items = [JudgeItem(run.by_name[r["persona"]], run.roster, Dialogue.from_dict(contexts[r["group_id"]]), r["rejected"],
                       run.pack.setting) for r in rows]
    verdicts = []
    for start in range(0, len(items), cfg.judge_batch_size):
        verdicts += judge.score_batch(items[start : start + cfg.judge_batch_size])
    scored = [{**r, "consistency_rejected": v.scores.get("consistency") if v.valid else None} for r, v in zip(rows, verdicts)]
    return keep_persona_separated(scored, cfg.cross_persona_margin)


def step_reward_model(run: Run) -> dict[str, Any]:
    from mascot.train.stage1.reward_model import train_reward_model

    pairs = read_jsonl(run.need("pairs", "pairs.jsonl"))
    train = [p for p in pairs if p["split"] != "rm_eval"]
    held = [p for p in pairs if p["split"] == "rm_eval"]
    run.progress.event("reward_model", "progress", 0, None, {"train_pairs": len(train), "eval_pairs": len(held)})
    return train_reward_model(run.cfg, train, held, reward_model_dir(run.out), run.work / "reward_model", run.progress)


def _reporter(run: Run, step: str, bar: Any, total: int, done: int = 0) -> Callable[[int], None]:
    """An `on_batch(n)` callback: advances the bar, and logs a progress event at most every 5 s and at the end."""
    state = {"n": done, "t": time.time()}

    def on_batch(n: int) -> None:
        bar.update(n)
        state["n"] += n
        if time.time() - state["t"] > 5 or state["n"] >= total:
            state["t"] = time.time()
            run.progress.event(step, "progress", state["n"], total)

    return on_batch
