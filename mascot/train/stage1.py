"""Stage 1 pipeline, `main(cfg)`: generate -> judge -> pairs -> reward_model -> grpo, then the run card.

Each step reads the previous step's file under `<output>/work/`, writes its own atomically, and is
recorded in `<output>/manifest.json`; a finished step is skipped when the command runs again (`redo`
re-runs named steps). Every event also goes to `<output>/progress.jsonl` for the admin tab.

    python -m mascot train stage1 --recipe tiny-cpu
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mascot.checkpoints import reward_model_dir, speakers_dir
from mascot.errors import ConfigError
from mascot.personas import Persona, PersonaPack, load_pack
from mascot.train.configs import STEPS, Stage1Config, grpo_completion_budget, world_size
from mascot.train.progress import (
    Manifest,
    ProgressLog,
    read_jsonl,
    read_progress,
    run_timed_step,
    skip_finished,
    write_json,
    write_jsonl,
)

log = logging.getLogger(__name__)
DATA_STEPS = ("generate", "judge", "pairs")


@dataclass
class Run:
    """Everything a step needs: config, output paths, the persona pack, progress log and manifest."""

    cfg: Stage1Config
    out: Path
    pack: PersonaPack
    personas: list[Persona]
    progress: ProgressLog
    manifest: Manifest
    show_bars: bool = True
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def work(self) -> Path:
        return self.out / "work"

    @property
    def roster(self) -> list[Persona]:
        return self.pack.active

    @property
    def by_name(self) -> dict[str, Persona]:
        return {p.name: p for p in self.pack.personas}

    def bar(self, total: int, desc: str) -> Any:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit="item", disable=not self.show_bars, dynamic_ncols=True)


def open_run(cfg: Stage1Config, show_bars: bool = True) -> Run:
    pack = load_pack(cfg.pack)
    if cfg.personas:  # train exactly these; they form the roster, as when switched on in the chat
        chosen = {pack.get(n).name for n in cfg.personas}
        for p in pack.personas:
            p.enabled = p.name in chosen
    personas = [p for p in pack.personas if p.enabled]
    if not personas:
        raise ConfigError(f"Pack {pack.name!r} has no active persona to train.")
    unknown = sorted(set(cfg.persona_overrides) - {p.key for p in personas})
    if unknown:
        raise ConfigError(f"persona_overrides names {', '.join(map(repr, unknown))}, not a trained persona of pack "
                          f"{pack.name!r}; valid keys: {', '.join(p.key for p in personas)}.")
    out = cfg.out
    out.mkdir(parents=True, exist_ok=True)
    return Run(cfg, out, pack, personas, ProgressLog(out / "progress.jsonl"), Manifest(out / "manifest.json"), show_bars)


# ------------------------------------------------------------------- steps
def step_generate(run: Run) -> dict[str, Any]:
    from mascot.backends import load_backend
    from mascot.backends.base import GenerationParams
    from mascot.data import load_scenarios
    from mascot.train.data import STOP, assign_rm_eval, generate_candidates, select_contexts

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
    counter = {"n": len(done) * cfg.k, "t": time.time(), "t0": time.time()}
    partial.parent.mkdir(parents=True, exist_ok=True)
    with partial.open("a", encoding="utf-8") as f:
        def on_group(g: dict[str, Any]) -> None:
            f.write(json.dumps(g, ensure_ascii=False) + "\n")
            f.flush()

        def on_batch(n: int) -> None:
            bar.update(n)
            counter["n"] += n
            if time.time() - counter["t"] > 5 or counter["n"] >= total:
                counter["t"] = time.time()
                run.progress.event("generate", "progress", counter["n"], total)

        groups = generate_candidates(backend, scenarios, run.personas, run.roster, k=cfg.k, params=params,
                                     batch_size=cfg.gen_batch_size, context_mode=cfg.context_mode,
                                     rm_eval_ids=rm_eval, done=done, on_group=on_group, on_batch=on_batch, seed=cfg.seed)
    bar.close()
    write_jsonl(run.work / "candidates.jsonl", groups)
    partial.unlink(missing_ok=True)
    seconds = time.time() - counter["t0"]
    new = total - len(done) * cfg.k
    empty = sum(1 for g in groups for c in g["candidates"] if not c.strip())
    return {"scenarios": cfg.scenarios, "contexts": len(scenarios), "rm_eval_contexts": len(rm_eval),
            "groups": len(groups), "candidates": total, "empty_candidates": empty,
            "candidates_per_second": round(new / seconds, 2) if seconds > 0 and new else None}


def step_judge(run: Run) -> dict[str, Any]:
    from mascot.judges import load_judge
    from mascot.train.data import judge_groups, with_rm_prompts

    cfg = run.cfg
    groups = read_jsonl(_need(run, "generate", "candidates.jsonl"))
    judge = load_judge(cfg.judge, **cfg.judge_kwargs)
    total = sum(len(g["candidates"]) for g in groups)
    bar = run.bar(total, f"judge ({cfg.judge})")
    state = {"n": 0, "t": time.time()}

    def on_batch(n: int) -> None:
        bar.update(n)
        state["n"] += n
        if time.time() - state["t"] > 5 or state["n"] >= total:
            state["t"] = time.time()
            run.progress.event("judge", "progress", state["n"], total)

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


def step_pairs(run: Run) -> dict[str, Any]:
    from mascot.train.pairs import build_pairs, cross_persona_pairs, load_extra_pairs

    cfg = run.cfg
    judged = read_jsonl(_need(run, "judge", "judged.jsonl"))
    pairs, stats = build_pairs(judged, cfg.delta, cfg.max_pairs_per_group, cfg.pair_criteria, cfg.pair_max_length_ratio)
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
    from mascot.dialogue import Dialogue
    from mascot.judges import JudgeItem, load_judge
    from mascot.train.pairs import keep_persona_separated

    cfg = run.cfg
    contexts = {g["group_id"]: g["context"] for g in read_jsonl(_need(run, "generate", "candidates.jsonl"))}
    judge = load_judge(cfg.judge, **cfg.judge_kwargs)
    items = [JudgeItem(run.by_name[r["persona"]], run.roster, Dialogue.from_dict(contexts[r["group_id"]]), r["rejected"],
                       run.pack.setting) for r in rows]
    verdicts = []
    for start in range(0, len(items), cfg.judge_batch_size):
        verdicts += judge.score_batch(items[start : start + cfg.judge_batch_size])
    scored = [{**r, "consistency_rejected": v.scores.get("consistency") if v.valid else None} for r, v in zip(rows, verdicts)]
    return keep_persona_separated(scored, cfg.cross_persona_margin)


def step_reward_model(run: Run) -> dict[str, Any]:
    from mascot.train.reward_model import train_reward_model

    pairs = read_jsonl(_need(run, "pairs", "pairs.jsonl"))
    train = [p for p in pairs if p["split"] != "rm_eval"]
    held = [p for p in pairs if p["split"] == "rm_eval"]
    run.progress.event("reward_model", "progress", 0, None, {"train_pairs": len(train), "eval_pairs": len(held)})
    return train_reward_model(run.cfg, train, held, reward_model_dir(run.out), run.work / "reward_model", run.progress)


def step_grpo(run: Run) -> dict[str, Any]:
    from mascot.rewards import JUDGE_REWARDS, RewardContext
    from mascot.train.data import grpo_rows, sft_rows
    from mascot.train.speakers import adapter_jobs, train_speaker

    cfg = run.cfg
    groups = read_jsonl(_need(run, "generate", "candidates.jsonl"))
    needs_judged = cfg.sft_warm_start or cfg.judge_length_control or cfg.rm_length_control
    judged = read_jsonl(_need(run, "judge", "judged.jsonl")) if needs_judged else []
    rm = None
    rewards = cfg.all_rewards()
    if "persona_rm" in rewards:
        from mascot.rewards.embedding_rm import load_reward_model

        rm = load_reward_model(cfg.model, reward_model_dir(run.out), dtype=cfg.train_dtype, batch_size=cfg.rm_batch_size,
                               device=_train_device())
    judge = None
    if JUDGE_REWARDS & set(rewards):  # the judge, relevance and consistency rewards read its verdicts
        from mascot.judges import load_judge

        judge = load_judge(cfg.judge, **cfg.judge_kwargs)
    ctx = RewardContext(personas=run.personas, roster=run.roster, min_words=cfg.format_min_words,
                        max_words=cfg.format_max_words, reward_model=rm, judge=judge, setting=run.pack.setting,
                        format_graded=cfg.format_graded, rm_norm=cfg.rm_reward_norm,
                        max_completion_tokens=grpo_completion_budget(cfg),
                        overlong_buffer=cfg.overlong_buffer, score_max_words=cfg.score_max_words,
                        judge_length_slopes=_judge_length_slopes(run, cfg, judged),
                        rm_length_slopes=_rm_length_slopes(run, cfg, rm, groups, judged))
    results: dict[str, Any] = {}
    if cfg.grpo_workers > 1 and not run.cache.get("only_jobs"):
        _grpo_in_workers(run)  # trains the pending adapters in child processes; the loop below then skips them
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


def _judge_length_slopes(run: Run, cfg: Stage1Config, judged: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
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


def _rm_length_slopes(run: Run, cfg: Stage1Config, rm: Any, groups: list[dict[str, Any]],
                      judged: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Per persona, (RM points per word, mean words) on the judged candidates scored by the trained RM (for
    `rm_length_control`). Computed once per GRPO step (work/rm_length_slopes.json); the per-persona workers read it."""
    from mascot.rewards import length_slopes, mean_words
    from mascot.speaker import clean_reply
    from mascot.train.data import with_rm_prompts

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


def _grpo_in_workers(run: Run) -> None:
    """Run pending GRPO adapters as `python -m mascot train stage1 --only grpo:<key>` child processes,
    `cfg.grpo_workers` at a time (logs in work/grpo-<key>.log), then reload the manifest they marked."""
    import subprocess
    import sys

    import yaml

    from mascot.train.speakers import adapter_jobs

    cfg = run.cfg
    redo = run.cache.get("redo", ())
    pending = [name for name, _, targets in adapter_jobs(cfg, run.personas, speakers_dir(run.out))
               if not (run.manifest.done(f"grpo:{name}") and all((t / "adapter_config.json").exists() for t in targets))
               or f"grpo:{name}" in redo]
    if len(pending) < 2:
        return
    resolved = run.work / "resolved-recipe.yaml"
    resolved.parent.mkdir(parents=True, exist_ok=True)
    data = {k: v for k, v in cfg.to_dict().items() if k != "recipe"}
    data["output_dir"] = str(run.out)
    data["grpo_workers"] = 1
    resolved.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    running: list[tuple[str, Any, Any]] = []
    failed: list[str] = []
    from mascot.train.allocator import ENV, workers_keep_freed_memory

    keep, why = workers_keep_freed_memory(min(cfg.grpo_workers, len(pending)))
    env = {**os.environ, ENV: "1" if keep else "0"}
    print(f"[stage1] GRPO workers {'keep' if keep else 'return'} freed memory ({why})")

    def reap(block: bool) -> None:
        for item in list(running):
            name, proc, log = item
            if block or proc.poll() is not None:
                if proc.wait() != 0:
                    failed.append(f"{name} (exit {proc.returncode}, log {log.name})")
                log.close()
                running.remove(item)
                return

    for name in pending:
        while len(running) >= cfg.grpo_workers:
            reap(block=False)
            time.sleep(2)
        argv = [sys.executable, "-m", "mascot", "train", "stage1", "--recipe", str(resolved), "--only", f"grpo:{name}",
                "--no-bars"] + (["--redo", f"grpo:{name}"] if f"grpo:{name}" in redo else [])
        log = (run.work / f"grpo-{name}.log").open("w", encoding="utf-8")
        print(f"[stage1] grpo:{name}: worker started (log {log.name})")
        running.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    while running:
        reap(block=True)
    run.manifest = Manifest(run.manifest.path)
    # the workers re-ran what --redo asked for: the in-process loop must now skip them, not train them again
    run.cache["redo"] = {r for r in run.cache.get("redo", ()) if r not in {f"grpo:{n}" for n in pending}}
    write_json(run.out / "recipe.json", {"recipe": cfg.recipe, "config": cfg.to_dict()})  # workers wrote theirs
    if failed:
        raise ConfigError(f"GRPO workers failed: {', '.join(failed)}. See the logs under {run.work}.")


def _train_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _need(run: Run, step: str, filename: str) -> Path:
    path = run.work / filename
    if not path.exists():
        raise ConfigError(f"{path} is missing: run the {step!r} step first (e.g. --only {step}).")
    return path


STEP_FUNCS: dict[str, Callable[[Run], dict[str, Any]]] = {
    "generate": step_generate,
    "judge": step_judge,
    "pairs": step_pairs,
    "reward_model": step_reward_model,
    "grpo": step_grpo,
}
assert tuple(STEP_FUNCS) == STEPS


# ------------------------------------------------------------------- main
def main(cfg: Stage1Config, only: list[str] | None = None, redo: list[str] | None = None, show_bars: bool = True) -> dict[str, Any]:
    """Run (or resume) the Stage-1 pipeline; returns the run card dict."""
    from mascot.train.allocator import keep_freed_memory
    from mascot.train.runcard import read_run_card, write_run_card

    for s in [*(only or []), *(redo or [])]:
        if s not in STEPS and not s.startswith("grpo:"):
            raise ConfigError(f"Unknown step {s!r}. Valid steps: {', '.join(STEPS)} (or grpo:<persona key>).")
    keep_freed_memory()  # every trainer step reuses its freed tensors instead of faulting them in again
    if cfg.torch_threads:
        import torch

        torch.set_num_threads(cfg.torch_threads)
    run = open_run(cfg, show_bars)
    run.cache["redo"] = expand_redo(redo or [], cfg, run.personas)
    run.cache["only_jobs"] = {o for o in only or [] if o.startswith("grpo:")}
    steps = [s for s in STEPS if not only or s in only or (s == "grpo" and any(o.startswith("grpo:") for o in only))]
    if world_size() > 1 and any(s in DATA_STEPS for s in steps):
        raise ConfigError("generate/judge/pairs run in a single process: run them without `accelerate launch` "
                          "(e.g. --only generate,judge,pairs), then launch --only reward_model,grpo on several GPUs.")
    write_json(run.out / "recipe.json", {"recipe": cfg.recipe, "config": cfg.to_dict()})
    share = lora_share(cfg)
    if share:
        run.cache["lora_share"] = share
        where = f" of the last {cfg.lora_layers} layers" if cfg.lora_layers else ""
        print(f"[stage1] speaker LoRA r={cfg.lora_r} on {','.join(cfg.lora_target_modules)}{where}: {share['trainable']:,} of "
              f"{share['total']:,} parameters trainable ({share['share_pct']:.4f} %)")
    run.progress.event("run", "started", metrics={"recipe": cfg.recipe, "steps": ",".join(steps),
                                                  "speaker_lora_share_pct": (share or {}).get("share_pct")})
    t_start = time.time()
    ran: list[str] = []
    for step in steps:
        redo_step = step in run.cache["redo"] or (step == "grpo" and any(r.startswith("grpo:") for r in run.cache["redo"]))
        if skip_finished(run.progress, run.manifest, step, redo_step, "stage1"):
            continue
        metrics = run_timed_step(run.progress, step, lambda: STEP_FUNCS[step](run), "stage1")
        ran.append(step)
        if not metrics.pop("_complete", True):  # some GRPO adapters were left for another invocation
            run.progress.event(step, "progress", message="some adapters are not trained yet")
            continue
        run.manifest.mark(step, metrics=metrics)
        run.progress.event(step, "done", metrics=_short(metrics))
        print(f"[stage1] {step}: done in {metrics['seconds']:.0f}s {_short(metrics)}")

    card = read_run_card(run.out)
    if ran or card is None:  # a run that only skipped finished steps keeps its card (and its timings)
        card = write_run_card(run, time.time() - t_start)
    run.progress.event("run", "done", metrics={"run_card": str(run.out / "run_card.json")})
    return card


def lora_share(cfg: Stage1Config) -> dict[str, Any] | None:
    """The speakers' trainable-parameter share from the base model's config (meta device, no weights)."""
    from pathlib import Path as _P

    from mascot.models import resolve_model
    from mascot.train.modeling import trainable_share_from_config

    try:
        path = resolve_model(cfg.model, progress=False)
        if not (_P(path) / "config.json").exists():
            return None
        from transformers import AutoConfig

        return trainable_share_from_config(AutoConfig.from_pretrained(path, local_files_only=True), cfg.lora_r,
                                           cfg.lora_alpha, cfg.lora_target_modules, cfg.lora_layers)
    except Exception as exc:  # sizing is informative only; never block a run on it
        log.warning("could not compute the LoRA share: %s", exc)
        return None


def expand_redo(redo: list[str], cfg: Stage1Config, personas: list[Persona]) -> set[str]:
    """`--redo STEP` re-runs STEP and every later step (their inputs change); `grpo:<key>` only that adapter."""
    from mascot.train.speakers import adapter_jobs

    jobs = [f"grpo:{name}" for name, _, _ in adapter_jobs(cfg, personas, Path("."))]
    out: set[str] = set()
    for r in redo:
        if r.startswith("grpo:"):
            if r not in jobs:
                raise ConfigError(f"Unknown GRPO job {r!r}. Jobs of this recipe: {', '.join(jobs)}.")
            out.add(r)
        else:
            out |= set(STEPS[STEPS.index(r):])
    if "grpo" in out:
        out |= set(jobs)
    return out


def _short(metrics: dict[str, Any]) -> dict[str, Any]:
    """Scalar metrics only (curves and nested tables stay in the manifest / run card)."""
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float, str)) or v is None}
