"""GRPO step time and peak memory at the `tiny-cpu` recipe's settings (a few real steps).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/grpo_step.py --steps 4 --json runs/grpo_step.json
    ... --threads 2 --lora-layers 0      # compare thread counts / LoRA on all layers

Runs TRL's GRPOTrainer with LoRA on the embedded SmolLM2-135M-Instruct, the recipe's composite reward
(the shipped reward model if `checkpoints/tiny-cpu/reward_model` exists, else a freshly initialised one of
the same size, so the scoring cost is the same) on speaker prompts built from the bundled scenarios.
Peak memory: process peak RSS (resource.getrusage ru_maxrss, includes the model) and the Python-heap
peak during training (tracemalloc; torch tensors are allocated outside it, hence small). CPU time in user and
kernel mode and the minor page faults of the training loop show what the allocator costs: like the training
commands, this keeps freed memory for reuse (mascot/train/allocator.py); compare with glibc's default:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/grpo_step.py --steps 4 --keep-freed-memory no

`--rollouts llamacpp|trainer` times GRPO with its completions sampled on llama.cpp or by TRL itself
(mascot/train/stage1/grpo_rollout.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from mascot.settings import apply_process_defaults


def rss_mb() -> float:
    """Current resident set size in MB (Linux /proc), for the before/after columns."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


def peak_rss_mb() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 1024 if sys.platform != "darwin" else r / 2**20


def build_reward_model(cfg, rm_dir: Path | None):
    from peft import get_peft_model

    from mascot.rewards.embedding_rm import is_embedding_rm, load_reward_model
    from mascot.rewards.persona_rm import PersonaRewardModel
    from mascot.train.modeling import load_seq_cls, load_tokenizer, num_layers
    from mascot.train.trl_configs import reward_lora_config

    if rm_dir is not None and ((rm_dir / "adapter_config.json").exists() or is_embedding_rm(rm_dir)):
        return load_reward_model(cfg.model, rm_dir, dtype=cfg.train_dtype, batch_size=cfg.rm_batch_size), str(rm_dir)
    tok = load_tokenizer(cfg.model, padding_side="right")
    model = load_seq_cls(cfg.model, cfg.train_dtype, tok.pad_token_id)
    model = get_peft_model(model, reward_lora_config(cfg, num_layers(model)))
    return PersonaRewardModel(model, tok, batch_size=cfg.rm_batch_size), "untrained (same size)"


def run(args: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset
    from trl import GRPOTrainer

    from mascot.data import load_scenarios
    from mascot.files.model_files import resolve_model
    from mascot.group.personas import load_pack
    from mascot.group.prompts import speaker_messages
    from mascot.rewards import JUDGE_REWARDS, RewardContext, get_reward_funcs
    from mascot.rewards.persona_rm import rm_prompt
    from mascot.train.allocator import ENV as KEEP_FREED_MEMORY_ENV
    from mascot.train.allocator import keep_freed_memory, parse_switch
    from mascot.train.modeling import load_tokenizer, num_layers, parameter_counts
    from mascot.train.recipes import load_recipe
    from mascot.train.stage1.data import default_directive
    from mascot.train.stage1.grpo_rollout import make_rollout
    from mascot.train.trl_configs import build_grpo_config, grpo_completion_budget, lora_config

    if args.keep_freed_memory is None:  # as `mascot train` does: the flag, else MASCOT_KEEP_FREED_MEMORY
        enabled = parse_switch(os.environ.get(KEEP_FREED_MEMORY_ENV))
    else:
        enabled = args.keep_freed_memory == "yes"
    kept = keep_freed_memory(enabled)
    overrides = {"max_steps": str(args.steps)}
    if args.lora_layers is not None:
        overrides["lora_layers"] = str(args.lora_layers) if args.lora_layers > 0 else "none"
    if args.threads:
        overrides["torch_threads"] = str(args.threads)
    if args.rollouts:
        overrides["grpo_rollouts"] = args.rollouts
    cfg = load_recipe(args.recipe, overrides)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    pack = load_pack(cfg.pack)
    roster = pack.active
    persona = pack.get(args.persona)
    scenarios = [s for s in load_scenarios(cfg.scenarios, split=cfg.train_split) if s.setting == pack.setting]
    rows = []
    for s in scenarios[: max(args.steps * 2, 8)]:
        d = s.to_dialogue()
        rows.append({"prompt": speaker_messages(persona, roster, d, default_directive(persona)), "persona": persona.name,
                     "rm_prompt": rm_prompt(persona, d), "context": json.dumps(d.to_dict())})
    rm, rm_source = build_reward_model(cfg, Path(args.reward_model) if args.reward_model else None)
    judge = None
    if JUDGE_REWARDS & set(cfg.rewards):
        from mascot.judges import load_judge

        judge = load_judge(cfg.judge, **cfg.judge_kwargs)
    # the recipe's reward settings, as step_grpo builds them (the length slopes, measured on a run's candidates, cost
    # nothing to apply and are left out)
    ctx = RewardContext(personas=[persona], roster=roster, min_words=cfg.format_min_words,
                        max_words=cfg.format_max_words, reward_model=rm, judge=judge, setting=pack.setting,
                        format_graded=cfg.format_graded, rm_norm=cfg.rm_reward_norm,
                        max_completion_tokens=grpo_completion_budget(cfg), overlong_buffer=cfg.overlong_buffer,
                        score_max_words=cfg.score_max_words)
    tok = load_tokenizer(cfg.model)
    model_path = resolve_model(cfg.model)
    with tempfile.TemporaryDirectory() as tmp:
        gcfg = build_grpo_config(cfg, tmp, max_steps=args.steps, model_is_path=True)
        gcfg.shuffle_dataset = False
        rss_before = rss_mb()
        rollout = make_rollout(cfg, tok, gcfg)
        trainer = GRPOTrainer(model=model_path, reward_funcs=get_reward_funcs(cfg.rewards, ctx), args=gcfg,
                              train_dataset=Dataset.from_list(rows), processing_class=tok,
                              peft_config=lora_config(cfg, num_layers(model_path)), rollout_func=rollout)
        counts = parameter_counts(trainer.model)
        tracemalloc.start()
        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.time()
        trainer.train()
        wall = time.time() - t0
        if rollout is not None:
            rollout.close()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        _, py_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        steps = [h for h in trainer.state.log_history if "step_time" in h]
    times = [float(h["step_time"]) for h in steps]
    later = times[1:] or times
    return {
        "recipe": args.recipe, "persona": persona.name, "steps": len(times),
        "num_generations": gcfg.num_generations, "completions_per_step": gcfg.per_device_train_batch_size,
        "max_completion_length": gcfg.max_completion_length, "beta": gcfg.beta,
        "torch_threads": torch.get_num_threads(), "lora_r": cfg.lora_r,
        "lora_layers": cfg.lora_layers or "all", "trainable_pct": counts["share_pct"],
        "reward_model": rm_source, "rewards": cfg.rewards,
        "step_seconds": [round(t, 2) for t in times],
        "mean_step_s": round(statistics.mean(later), 2) if later else None,
        "median_step_s": round(statistics.median(later), 2) if later else None,
        "first_step_s": round(times[0], 2) if times else None,
        "wall_s": round(wall, 1),
        "user_cpu_s": round(usage.ru_utime - usage0.ru_utime, 1), "kernel_cpu_s": round(usage.ru_stime - usage0.ru_stime, 1),
        "minor_page_faults": usage.ru_minflt - usage0.ru_minflt,
        "keep_freed_memory": kept, "rollouts": cfg.grpo_rollouts,
        "mean_completion_tokens": round(statistics.mean(float(h.get("completions/mean_length", 0)) for h in steps), 1) if steps else None,
        "rss_before_train_mb": round(rss_before, 1), "peak_rss_mb": round(peak_rss_mb(), 1),
        "python_heap_peak_mb": round(py_peak / 2**20, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
        "versions": {m: __import__(m).__version__ for m in ("torch", "transformers", "trl", "peft")},
    }


def print_table(r: dict) -> None:
    rows = [
        ("setting", f"{r['recipe']} / {r['persona']}: {r['completions_per_step']} completions x {r['max_completion_length']} tokens, "
                    f"LoRA r={r['lora_r']} on {r['lora_layers']} layers, beta={r['beta']}, threads={r['torch_threads']}"),
        ("steps timed", r["steps"]),
        ("step time mean / median (after the first)", f"{r['mean_step_s']} s / {r['median_step_s']} s"),
        ("first step", f"{r['first_step_s']} s"),
        ("all step times", ", ".join(map(str, r["step_seconds"]))),
        ("CPU time: user / kernel (training loop)", f"{r['user_cpu_s']} s / {r['kernel_cpu_s']} s, "
                                                    f"{r['minor_page_faults']:,} minor page faults"),
        ("freed memory kept for reuse (--keep-freed-memory)", r["keep_freed_memory"]),
        ("completions sampled by (grpo_rollouts)", r["rollouts"]),
        ("mean completion length", f"{r['mean_completion_tokens']} tokens"),
        ("peak RSS (ru_maxrss)", f"{r['peak_rss_mb']} MB (RSS before training {r['rss_before_train_mb']} MB)"),
        ("Python heap peak (tracemalloc)", f"{r['python_heap_peak_mb']} MB"),
        ("trainable parameters", f"{r['trainable_pct']} %"),
        ("reward model", r["reward_model"]),
        ("load average (1 min) / CPUs", f"{r['load_avg_1m']} / {r['cpus']}"),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n" + "\n".join(f"{k:<{width}}  {v}" for k, v in rows))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", default="tiny-cpu")
    p.add_argument("--steps", type=int, default=4, help="GRPO steps to time (the first is reported separately)")
    p.add_argument("--persona", default="Anchor")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: the recipe's torch_threads)")
    p.add_argument("--lora-layers", type=int, default=None, help="LoRA on the last N layers; 0 = all layers")
    p.add_argument("--rollouts", choices=["trainer", "llamacpp"], default=None,
                   help="who samples the completions (default: the recipe's grpo_rollouts)")
    p.add_argument("--reward-model", default="checkpoints/tiny-cpu/reward_model",
                   help="trained RM adapter folder (falls back to an untrained RM of the same size)")
    p.add_argument("--keep-freed-memory", choices=("yes", "no"), default=None,
                   help="keep freed memory for reuse, as the training commands do (default yes; "
                        "MASCOT_KEEP_FREED_MEMORY=0 or no: glibc's default allocator)")
    p.add_argument("--json", default=None, help="also write the result as JSON here")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # TRL warns on every step that rollout_func is experimental
    apply_process_defaults()  # before torch starts its thread pool
    result = run(args)
    print_table(result)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
