"""Stage 1's GRPO step: the rewards every adapter job shares, then one GRPO run per adapter (in this process or
in parallel worker processes, `mascot.train.stage1.workers`), each after its optional SFT warm start.

The length controls measure here, once per step, how many reward points one more word earns per persona (on the
judged candidates), so the rewards can take that off (`judge_length_control`, `rm_length_control`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mascot.files.checkpoints import reward_model_dir, speakers_dir
from mascot.train.progress import read_jsonl, write_json
from mascot.train.stage1.config import Stage1Config
from mascot.train.stage1.workers import train_in_workers
from mascot.train.trl_configs import grpo_completion_budget

if TYPE_CHECKING:
    from mascot.train.stage1.pipeline import Run


def step_grpo(run: Run) -> dict[str, Any]:
    from mascot.rewards import JUDGE_REWARDS, RewardContext
    from mascot.train.stage1.data import grpo_rows, sft_rows
    from mascot.train.stage1.speakers import adapter_jobs, train_speaker

    cfg = run.cfg
    groups = read_jsonl(run.need("generate", "candidates.jsonl"))
    needs_judged = cfg.sft_warm_start or cfg.judge_length_control or cfg.rm_length_control
    judged = read_jsonl(run.need("judge", "judged.jsonl")) if needs_judged else []
    rm = None
    rewards = cfg.all_rewards()
    if "persona_rm" in rewards:
        from mascot.rewards.embedding_rm import load_reward_model

        rm = load_reward_model(cfg.model, reward_model_dir(run.out), dtype=cfg.train_dtype, batch_size=cfg.rm_batch_size,
                               device=train_device())
    judge = None
    if JUDGE_REWARDS & set(rewards):  # the judge, relevance and consistency rewards read its verdicts
        from mascot.judges import load_judge

        judge = load_judge(cfg.judge, **cfg.judge_kwargs)
    ctx = RewardContext(personas=run.personas, roster=run.roster, min_words=cfg.format_min_words,
                        max_words=cfg.format_max_words, reward_model=rm, judge=judge, setting=run.pack.setting,
                        format_graded=cfg.format_graded, rm_norm=cfg.rm_reward_norm,
                        max_completion_tokens=grpo_completion_budget(cfg),
                        overlong_buffer=cfg.overlong_buffer, score_max_words=cfg.score_max_words,
                        judge_length_slopes=judge_length_slopes(run, cfg, judged),
                        rm_length_slopes=rm_length_slopes(run, cfg, rm, groups, judged))
    results: dict[str, Any] = {}
    if cfg.grpo_workers > 1 and not run.cache.get("only_jobs"):
        train_in_workers(run)  # trains the pending adapters in child processes; the loop below then skips them
    for name, personas, targets in adapter_jobs(cfg, run.personas, speakers_dir(run.out)):
        sub = f"grpo:{name}"
        only_jobs = run.cache.get("only_jobs") or set()
        if only_jobs and sub not in only_jobs:
            results[name] = run.manifest.get(sub).get("metrics", {})
            continue
        finished = run.manifest.done(sub) and all((t / "adapter_config.json").exists() for t in targets)
        if finished and sub not in run.cache.get("redo", ()):
            run.progress.event(sub, "skipped", message="finished earlier")
            results[name] = run.manifest.get(sub).get("metrics", {})
            continue
        job = cfg.for_persona(name)  # a per-persona job with its persona_overrides applied
        rows = [r for p in personas for r in grpo_rows(groups, run.by_name, run.roster, p.name, cfg.grpo_max_prompts, cfg.seed)]
        warm = [r for p in personas for r in sft_rows(groups, judged, run.by_name, run.roster, p.name, job.sft_min_score, job.sft_criterion,
                                                   job.sft_trim, job.sft_max_examples, job.sft_rank_weights,
                                                   job.sft_max_words)] \
            if cfg.sft_warm_start else None
        run.progress.event(sub, "started", 0, cfg.max_steps or cfg.grpo.get("max_steps"),
                           {"prompts": len(rows), "warm_start_examples": len(warm) if warm is not None else None})
        sft_targets = [run.out / "sft" / t.name for t in targets] if cfg.sft_save and warm else None
        metrics = train_speaker(job, name, rows, ctx, targets, run.work / f"grpo-{name}", run.progress, sft_rows=warm,
                                sft_targets=sft_targets, curves_dir=run.out / "curves")
        run.manifest.mark(sub, metrics=metrics)
        run.progress.event(sub, "done", metrics["steps"], metrics["steps"], {k: v for k, v in metrics.items() if k != "curve"})
        results[name] = metrics
    complete = all(run.manifest.done(f"grpo:{name}") for name, _, _ in adapter_jobs(cfg, run.personas, Path(".")))
    return {"adapter_mode": cfg.adapter_mode, "adapters": results, "_complete": complete}


def judge_length_slopes(run: Run, cfg: Stage1Config, judged: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """Per persona and criterion, the judge points one more word earns on the judged candidates (for
    `judge_length_control`); logged so the run shows what was taken off."""
    from mascot.rewards import JUDGE_SIGNALS, length_slopes, signal_criteria

    if not cfg.judge_length_control:
        return {}
    criteria = sorted({c or "aggregate" for r in cfg.all_rewards() if r in JUDGE_SIGNALS for c in signal_criteria(JUDGE_SIGNALS[r])})
    slopes = length_slopes(judged, criteria)
    if not run.cache.get("only_jobs"):  # the parent logs them once; its per-persona workers measure the same
        run.progress.event("grpo", "metrics", message="judge length slopes (points per word): " +
                           ", ".join(f"{p}/{c} {v:+.4f}" for (p, c), v in sorted(slopes.items())))
    return slopes


def rm_length_slopes(run: Run, cfg: Stage1Config, rm: Any, groups: list[dict[str, Any]],
                      judged: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Per persona, (RM points per word, mean words) on the judged candidates scored by the trained RM (for
    `rm_length_control`). Computed once per GRPO step (work/rm_length_slopes.json); the per-persona workers read it."""
    from mascot.group.cleaning import clean_reply
    from mascot.rewards import length_slopes, mean_words
    from mascot.train.stage1.data import with_rm_prompts

    if not cfg.rm_length_control or rm is None:
        return {}
    cache = run.work / "rm_length_slopes.json"
    if run.cache.get("only_jobs") and cache.exists():  # a worker: its parent measured them for this step
        return {p: (v[0], v[1]) for p, v in json.loads(cache.read_text()).items()}
    rows = with_rm_prompts(judged, groups, run.by_name)
    texts = [[clean_reply(c, run.by_name[row["persona"]], run.roster) for c in row["candidates"]] for row in rows]
    flat = rm.score_texts([row["rm_prompt"] for row, ts in zip(rows, texts) for _ in ts], [t for ts in texts for t in ts])
    scored, at = [], 0
    for row, ts in zip(rows, texts):  # one RM call over all candidates (it batches), split back per group
        scored.append({"persona": row["persona"], "candidates": ts, "scores": flat[at:at + len(ts)]})
        at += len(ts)
    slopes, means = length_slopes(scored, ["aggregate"]), mean_words(scored)
    out = {p: (slopes[(p, "aggregate")], means[p]) for p in means if (p, "aggregate") in slopes}
    cache.parent.mkdir(parents=True, exist_ok=True)
    write_json(cache, out)
    run.progress.event("grpo", "metrics", message="reward-model length slopes (points per word, mean words): " +
                       ", ".join(f"{p} {s:+.4f} @ {m:.1f}" for p, (s, m) in sorted(out.items())))
    return out


def train_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
