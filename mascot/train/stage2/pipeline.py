"""Stage 2 pipeline, `main(cfg)`: states -> grpo, then the run card. The director learns by GRPO.

- `states`: simulate conversations on the training seeker scripts through the live chat's GroupChat
  batch path (frozen Stage-1 speakers, a `state_director`, the replay/llm simulated user) and cut
  dialogue states at different positions (right after a user message, after one persona, ...).
- `grpo`: TRL GRPOTrainer with LoRA on the director only. Prompts are the states rendered with the
  chat's director prompt plus the `{"speaker": "` prefill; completions are directives; rewards are the
  group reward of the N-turn rollout and the format reward (`mascot.train.stage2.rewards`).

Outputs: `<run>/director/` (PEFT adapter the chat's `trained` mode loads), and under `<run>/stage2/`:
`progress.jsonl` (the admin Train tab follows it), `manifest.json` (finished steps are skipped on the
next run; an interrupted GRPO resumes from its last `checkpoint-*`), `run_card.json` + `README.md`, `work/`.

    python -m mascot train stage2 --recipe tiny-cpu
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mascot.errors import ConfigError
from mascot.files.checkpoints import director_adapter_dir
from mascot.group.personas import PersonaPack, load_pack
from mascot.train.processes import is_main_process, world_size
from mascot.train.progress import (
    Manifest,
    ProgressLog,
    read_jsonl,
    run_timed_step,
    skip_finished,
    write_json,
    write_jsonl,
)
from mascot.train.stage2.config import STAGE2_STEPS, Stage2Config
from mascot.train.trl_configs import build_grpo_config, build_sft_config, lora_config


@dataclass
class Stage2Run:
    cfg: Stage2Config
    pack: PersonaPack
    progress: ProgressLog
    manifest: Manifest
    show_bars: bool = True
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def work(self) -> Path:
        return self.cfg.stage_dir / "work"

    @property
    def roster(self) -> list:
        return self.pack.active


def frozen_chat(cfg: Stage2Config, pack: PersonaPack, mode: str, backend: Any = None, temperature: float | None = None) -> Any:
    """A GroupChat over the rollout backend with the frozen Stage-1 speaker adapters attached."""
    from mascot.backends import load_backend
    from mascot.backends.base import GenerationParams
    from mascot.group.chat import OFFLINE, GroupChat
    from mascot.group.engine import Engine, EngineConfig
    from mascot.group.speaker import adapter_name

    run_dir = Path(cfg.checkpoints_dir) / cfg.speakers_run if cfg.speakers_run else cfg.out
    if backend is None:
        backend = load_backend(cfg.rollout_backend, model=cfg.model, dtype=cfg.dtype)
        engine = Engine(EngineConfig(backend=cfg.rollout_backend, model=cfg.model), backend, run_dir=run_dir)
        warnings = [w for p in pack.personas for w in engine.attach_persona(p)]
        if not any(adapter_name(p) in backend.adapters for p in pack.active):
            warnings.append(f"no Stage-1 speaker adapters in {run_dir / 'speakers'}: the rollouts' speakers are the "
                            "prompted base model. Pass --speakers_run RUN (e.g. tiny-cpu) to freeze a trained run's speakers.")
        for w in warnings:
            print(f"[stage2] warning: {w}")
    params = None
    if temperature is not None:
        params = GenerationParams(max_new_tokens=cfg.rollout_max_new_tokens, temperature=temperature, top_p=0.9,
                                  repetition_penalty=1.1, stop=("\n\n", "\nUser:"))
    return GroupChat(backend, pack.active, mode=mode, max_speakers=cfg.max_speakers, speaker_params=params,
                     policy=OFFLINE, concern_opener=pack.concern_opener)


def make_user(cfg: Stage2Config, backend: Any, roster: list) -> Any:
    from mascot.simusers import load_simuser

    if cfg.simuser == "llm":
        return load_simuser("llm", backend, profile=cfg.simuser_profile, companions=[p.name for p in roster], seed=cfg.seed)
    return load_simuser("replay")


# ------------------------------------------------------------------- steps
def cut_states(dialogue: Any, opening_turns: int, max_speakers: int) -> list[Any]:
    """Every point of a simulated conversation where the director decides: right after each user
    message and after each persona reply that leaves room for another (prefixes of the dialogue)."""
    from mascot.group.dialogue import Dialogue

    out = []
    turns = dialogue.turns
    for i in range(opening_turns, len(turns) + 1):
        prefix = turns[:i]
        if not prefix:
            continue
        since_user = 0
        for t in reversed(prefix):
            if t.is_user:
                break
            since_user += 1
        if any(t.is_user for t in prefix) and since_user < max_speakers and not prefix[-1].meta.get("crisis"):
            out.append(Dialogue(turns=list(prefix), situation=dialogue.situation, emotion=dialogue.emotion))
    return out


def step_states(run: Stage2Run) -> dict[str, Any]:
    from mascot.group.rollouts import Rollout, roll_forward
    from mascot.simusers import load_scripts

    cfg = run.cfg
    scripts = load_scripts(cfg.scripts, cfg.train_split, cfg.max_scripts)
    chat = frozen_chat(cfg, run.pack, cfg.state_director)
    run.cache["backend"] = chat.backend
    user = make_user(cfg, chat.backend, run.roster)
    rollouts = [Rollout.from_script(f"state-{s.id}", s, seed=cfg.seed * 1000 + i) for i, s in enumerate(scripts)]
    t0 = time.time()
    run.progress.event("states", "progress", 0, len(rollouts), message="simulating conversations")
    batch = 8
    bar = _bar(run, len(rollouts), "simulate")
    for start in range(0, len(rollouts), batch):
        chunk = rollouts[start : start + batch]
        roll_forward(chat, chunk, user, user_turns=cfg.state_user_turns - 1 if cfg.state_user_turns > 1 else 0)
        # finish the last round: the group answers the last user message
        bar.update(len(chunk))
        run.progress.event("states", "progress", min(start + batch, len(rollouts)), len(rollouts))
    bar.close()
    rows = []
    for r in rollouts:
        for j, d in enumerate(cut_states(r.dialogue, 1, cfg.max_speakers)):
            rows.append({"state_id": f"{r.script.id}:{j}", "script_id": r.script.id, "position": len(d.turns),
                         "spoken_this_round": len(d.current_round()), "state": d.to_dict()})
    random.Random(cfg.seed).shuffle(rows)
    if cfg.max_states:
        # keep a spread of positions: round-robin over "personas already spoken this round"
        by_k: dict[int, list[dict[str, Any]]] = {}
        for row in rows:
            by_k.setdefault(row["spoken_this_round"], []).append(row)
        picked: list[dict[str, Any]] = []
        while len(picked) < cfg.max_states and any(by_k.values()):
            for k in sorted(by_k):
                if by_k[k] and len(picked) < cfg.max_states:
                    picked.append(by_k[k].pop())
        rows = picked
    write_jsonl(run.work / "states.jsonl", rows)
    write_jsonl(run.work / "state_dialogues.jsonl", [{"script_id": r.script.id, "dialogue": r.dialogue.to_dict()} for r in rollouts])
    return {"scripts": len(scripts), "states": len(rows), "simulate_seconds": round(time.time() - t0, 1),
            "by_spoken": {str(k): sum(1 for r in rows if r["spoken_this_round"] == k) for k in range(cfg.max_speakers)}}


def director_prompt_text(tokenizer: Any, roster: list, dialogue: Any, max_speakers: int, min_speakers: int = 1) -> str:
    """The exact text the chat's director sees: chat template of `director_messages` plus the prefill."""
    from mascot.group.prompts import DIRECTOR_PREFILL, director_messages

    msgs = director_messages(roster, dialogue, max_speakers, min_speakers=min_speakers)
    return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) + DIRECTOR_PREFILL


def step_grpo(run: Stage2Run) -> dict[str, Any]:
    from datasets import Dataset
    from transformers.trainer_utils import get_last_checkpoint
    from trl import GRPOTrainer

    from mascot.files.model_files import resolve_model
    from mascot.group.dialogue import Dialogue
    from mascot.group.director import Director
    from mascot.judges.group import load_group_judge
    from mascot.simusers import load_scripts
    from mascot.train.modeling import (
        base_display_name,
        load_tokenizer,
        lora_state,
        num_layers,
        parameter_counts,
        save_adapter,
    )
    from mascot.train.progress import make_trainer_callback
    from mascot.train.stage1.speakers import curve_summary
    from mascot.train.stage2.rewards import STAGE2_REWARDS, RewardEnv

    cfg = run.cfg
    states_file = run.work / "states.jsonl"
    if not states_file.exists():
        raise ConfigError(f"{states_file} is missing: run the 'states' step first (--only states).")
    states = read_jsonl(states_file)
    tokenizer = load_tokenizer(cfg.model, padding_side="left")
    rows = [{"prompt": director_prompt_text(tokenizer, run.roster, Dialogue.from_dict(s["state"]), cfg.max_speakers, cfg.min_speakers),
             "state": json.dumps(s["state"], ensure_ascii=False), "script_id": s["script_id"], "state_id": s["state_id"]}
            for s in states]
    # the states step's backend (frozen speakers attached) is reused when both steps run in one invocation
    chat = frozen_chat(cfg, run.pack, cfg.rollout_director, backend=run.cache.get("backend"), temperature=cfg.rollout_temperature)
    scripts = {s.id: s for s in load_scripts(cfg.scripts, "all")}
    env = RewardEnv(chat=chat, user=make_user(cfg, chat.backend, run.roster), judge=load_group_judge(cfg.group_judge, **cfg.group_judge_kwargs),
                    roster=run.roster, rules=Director(cfg.max_speakers, False, cfg.min_speakers), scripts=scripts,
                    block_turns=cfg.block_turns, setting=run.pack.setting, repeat_penalty=cfg.repeat_penalty)
    funcs = [STAGE2_REWARDS[name](env) for name in cfg.rewards]
    out_dir = run.work / "grpo"
    args = build_grpo_config(cfg, out_dir, max_steps=cfg.max_steps, model_is_path=True)
    model_path = resolve_model(cfg.model)
    last = get_last_checkpoint(str(out_dir)) if out_dir.is_dir() else None
    model: Any = model_path
    warm = None
    if cfg.warm_start_epochs > 0 and not last:  # a resumed run restores the warm-started adapter from its checkpoint
        run.progress.event("warm_start:director", "started")
        model, warm = warm_start(cfg, run, warm_start_rows(cfg, states, [r["prompt"] for r in rows], run.roster), tokenizer)
        run.progress.event("warm_start:director", "done", metrics=warm)
        print(f"[stage2] format warm start: {warm['steps']} steps, loss {warm['first_loss']} -> {warm['last_loss']}")
        args.model_init_kwargs = None  # the model object already exists
    trainer = GRPOTrainer(model=model, reward_funcs=funcs, args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tokenizer,
                          peft_config=None if warm is not None else lora_config(cfg, num_layers(model_path)),
                          callbacks=[make_trainer_callback(run.progress, "grpo:director")])
    counts = parameter_counts(trainer.model)
    before = lora_state(trainer.model)
    if last:
        print(f"[stage2] resuming GRPO from {last}")
        run.progress.event("grpo:director", "progress", message=f"resuming from {Path(last).name}")
    t0 = time.time()
    trainer.train(resume_from_checkpoint=last)
    seconds = time.time() - t0
    after = lora_state(trainer.model)
    files = save_adapter(trainer.model, director_adapter_dir(cfg.out), base_display_name(cfg.model))
    history = list(trainer.state.log_history)
    keys = ("reward", "reward_std", "rewards/group_reward/mean", "rewards/format_reward/mean", "group/valid_directive_share",
            "group/yield_share", "group/block_score_mean", "loss", "completions/mean_length")
    curve = [{"step": h.get("step"), **{k: round(float(h[k]), 4) for k in keys if h.get(k) is not None}} for h in history if "reward" in h]
    summary = curve_summary(history)
    for k in keys[2:7]:
        vals = [c[k] for c in curve if k in c]
        if vals:
            w = min(3, len(vals))
            summary[k] = {"first": round(sum(vals[:w]) / w, 4), "last": round(sum(vals[-w:]) / w, 4), "n": len(vals)}
    return {"prompts": len(rows), "steps": trainer.state.global_step, "params": counts,
            "changed_tensors": sum(not before[n].equal(after[n]) for n in before), "trainable_tensors": len(before),
            # LoRA B starts at zero: a non-zero B means the adapter was trained (warm start and/or GRPO)
            "trained_lora_b": sum(bool(after[n].abs().sum() > 0) for n in after if "lora_B" in n),
            "files": files, "reward_funcs": list(trainer.reward_func_names), "reward_weights": list(cfg.reward_weights),
            "summary": summary, "curve": curve, "grpo_seconds": round(seconds, 1),
            "seconds_per_step": round(seconds / max(1, trainer.state.global_step), 2), "resumed_from": Path(last).name if last else None,
            "warm_start": warm}


def warm_start_rows(cfg: Stage2Config, states: list[dict[str, Any]], prompts: list[str], roster: list) -> list[dict[str, str]]:
    """Format warm-start targets: a random allowed speaker (or `none` where yielding is allowed) with that
    persona's default action and tone, as the completion after the `{"speaker": "` prefill."""
    from mascot.group.dialogue import Dialogue
    from mascot.group.director import YIELD, Director, DirectorState

    rules = Director(cfg.max_speakers, False, cfg.min_speakers)
    rng = random.Random(cfg.seed + 11)
    rows = []
    for s, prompt in zip(states, prompts):
        st = DirectorState(Dialogue.from_dict(s["state"]), roster, 0)
        allowed = rules.allowed(st)
        if rules.may_yield(st) and (not allowed or rng.random() < cfg.warm_start_yield_share):
            rows.append({"prompt": prompt, "completion": f'{YIELD}"}}'})
        elif allowed:
            p = rng.choice(allowed)
            rows.append({"prompt": prompt, "completion": f'{p.name}", "action": "{p.default_action}", "tone": "{p.default_tone}"}}'})
    return rows


def warm_start(cfg: Stage2Config, run: Stage2Run, rows: list[dict[str, str]], tokenizer: Any) -> tuple[Any, dict[str, Any]]:
    """LoRA SFT (completion-only loss) on the format targets; returns the PEFT model GRPO continues."""
    from datasets import Dataset
    from trl import SFTTrainer

    from mascot.files.model_files import resolve_model
    from mascot.train.modeling import num_layers
    from mascot.train.progress import make_trainer_callback

    t0 = time.time()
    path = resolve_model(cfg.model)
    args = build_sft_config(cfg, run.work / "warm_start", model_is_path=True)
    trainer = SFTTrainer(model=path, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                         peft_config=lora_config(cfg, num_layers(path)),
                         callbacks=[make_trainer_callback(run.progress, "warm_start:director")])
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    model = trainer.model
    tokenizer.padding_side = "left"
    return model, {"examples": len(rows), "steps": trainer.state.global_step, "first_loss": losses[0] if losses else None,
                   "last_loss": losses[-1] if losses else None, "seconds": round(time.time() - t0, 1)}


STEP_FUNCS = {"states": step_states, "grpo": step_grpo}


def _bar(run: Stage2Run, total: int, desc: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="item", disable=not run.show_bars, dynamic_ncols=True)


# ------------------------------------------------------------------- run card
def write_stage2_card(run: Stage2Run, seconds: float) -> dict[str, Any]:
    from mascot.train.runcard import _folder_size, _versions

    cfg = run.cfg
    steps = {k: v.get("metrics", {}) for k, v in run.manifest.data["steps"].items()}
    adapter = director_adapter_dir(cfg.out)
    grpo = steps.get("grpo", {})
    card = {
        "run": cfg.run, "stage": 2, "description": cfg.description, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "recipe": cfg.recipe, "config_fingerprint": cfg.fingerprint(), "base_model": cfg.model, "pack": run.pack.name,
        "personas": [p.name for p in run.roster], "states": steps.get("states", {}),
        "reward": {"rewards": cfg.rewards, "weights": cfg.reward_weights, "group_judge": cfg.group_judge,
                   "block_turns": cfg.block_turns, "rollout_director": cfg.rollout_director, "simuser": cfg.simuser},
        "grpo": {k: v for k, v in grpo.items() if k != "curve"}, "reward_curve": grpo.get("curve", []),
        "trainable_share_pct": (grpo.get("params") or {}).get("share_pct"),
        "adapter": {"path": "director", "bytes": _folder_size(adapter)} if adapter.is_dir() else None,
        "seconds": {"total_this_invocation": round(seconds, 1), **{k: v.get("seconds") for k, v in steps.items()},
                    "total_all_steps": round(sum(v.get("seconds") or 0 for v in steps.values()), 1)},
        "versions": _versions(), "config": cfg.to_dict(),
    }
    write_json(cfg.stage_dir / "run_card.json", card)
    s = (grpo.get("summary") or {})

    def fl(key: str) -> str:
        v = s.get(key)
        return f"{v['first']:.3f} → {v['last']:.3f}" if v else "—"

    lines = [f"# Stage 2 (director) of run `{cfg.run}`", "", cfg.description, "",
             f"- Recipe `{cfg.recipe}` (config {cfg.fingerprint()}), base `{cfg.model}`, pack `{run.pack.name}`",
             f"- States: {card['states'].get('states')} from {card['states'].get('scripts')} simulated conversations",
             f"- Reward: {' + '.join(f'{w}×{r}' for r, w in zip(cfg.rewards, cfg.reward_weights))}; N={cfg.block_turns} turns, "
             f"{cfg.group_judge} group judge, {cfg.simuser} simulated user, rollout director {cfg.rollout_director}",
             f"- GRPO: {grpo.get('steps')} steps, {grpo.get('seconds_per_step')} s/step; trainable share {card['trainable_share_pct']} %",
             f"- Reward (first → last 3 steps): total {fl('reward')}, group {fl('rewards/group_reward/mean')}, "
             f"format {fl('rewards/format_reward/mean')}, valid directives {fl('group/valid_directive_share')}",
             f"- Time: {card['seconds']['total_all_steps']} s over all steps", "",
             "Adapter: `../director/` (standard PEFT). Full metrics and the reward curve: `run_card.json`.", ""]
    if is_main_process():
        (cfg.stage_dir / "README.md").write_text("\n".join(lines), encoding="utf-8")
    return card


# ------------------------------------------------------------------- main
def main(cfg: Stage2Config, only: list[str] | None = None, redo: list[str] | None = None, show_bars: bool = True,
         keep_freed_memory: bool = True) -> dict[str, Any]:
    """Run (or resume) the Stage-2 pipeline; returns the run card. `keep_freed_memory` is the allocator switch
    (mascot/train/allocator.py) the entry point read."""
    for s in [*(only or []), *(redo or [])]:
        if s not in STAGE2_STEPS:
            raise ConfigError(f"Unknown stage-2 step {s!r}. Valid steps: {', '.join(STAGE2_STEPS)}.")
    from mascot.backends import resolve_kind

    if resolve_kind(cfg.rollout_backend, cfg.model) == "llamacpp":
        from mascot.backends.llamacpp.runtime import import_llama_cpp

        import_llama_cpp()  # before torch (a no-op when `mascot train` already loaded it under the settings' policy)
    from mascot.train.allocator import keep_freed_memory as keep_freed

    keep_freed(keep_freed_memory)  # every trainer step reuses its freed tensors instead of faulting them in again
    if cfg.torch_threads:
        import torch

        torch.set_num_threads(cfg.torch_threads)
    pack = load_pack(cfg.pack)
    if len(pack.active) < 2:
        raise ConfigError(f"Pack {pack.name!r} has {len(pack.active)} active persona(s): a director needs at least 2.")
    cfg.stage_dir.mkdir(parents=True, exist_ok=True)
    run = Stage2Run(cfg, pack, ProgressLog(cfg.stage_dir / "progress.jsonl"), Manifest(cfg.stage_dir / "manifest.json"), show_bars)
    write_json(cfg.stage_dir / "recipe.json", {"recipe": cfg.recipe, "config": cfg.to_dict()})
    steps = [s for s in STAGE2_STEPS if not only or s in only]
    if world_size() > 1 and "states" in steps:
        raise ConfigError("states (simulated conversations) run in a single process: run `--only states` without "
                          "`accelerate launch`, then launch `--only grpo` on several processes.")
    redo_set = set(redo or [])
    if "states" in redo_set:
        redo_set.add("grpo")
    run.progress.event("run", "started", metrics={"recipe": cfg.recipe, "steps": ",".join(steps), "stage": 2,
                                                  "processes": world_size()})
    t_start = time.time()
    for step in steps:
        if skip_finished(run.progress, run.manifest, step, step in redo_set, "stage2"):
            continue
        metrics = run_timed_step(run.progress, step, lambda step=step: STEP_FUNCS[step](run), "stage2")
        run.manifest.mark(step, metrics=metrics)
        run.progress.event(step, "done", metrics={k: v for k, v in metrics.items() if k not in ("curve",)})
        print(f"[stage2] {step}: done in {metrics['seconds']} s")
    card = write_stage2_card(run, time.time() - t_start)
    run.progress.event("run", "done", metrics={"seconds": round(time.time() - t_start, 1)})
    return card
