"""`python -m mascot train stage1|stage2 --recipe NAME|PATH [--max-steps N] [--output DIR] [--only STEPS] [--FIELD VALUE ...]`

Any recipe field can be overridden as `--field value` (hyphens or underscores), TRL trainer fields as
`--reward_model.<field> value` / `--grpo.<field> value`. Unknown fields and recipes fail with the valid names.

The training processes keep freed memory for reuse (mascot/train/allocator.py) unless `--keep-freed-memory no`
or, when the flag is not given, `MASCOT_KEEP_FREED_MEMORY=0`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from mascot.errors import ConfigError
from mascot.train.allocator import ENV as KEEP_FREED_MEMORY_ENV
from mascot.train.allocator import parse_switch
from mascot.train.processes import is_main_process
from mascot.train.recipes import list_recipes, load_recipe, recipe_backend
from mascot.train.stage1.config import STEPS
from mascot.train.stage2.config import STAGE2_STEPS


class _OverrideParser(argparse.ArgumentParser):
    """Keeps unknown `--field value` flags as recipe overrides instead of rejecting them (argparse
    passes a subparser's leftovers up to the top-level parser, which would error out). No abbreviations: a recipe
    field such as `--k 2` must not be read as a prefix of `--keep-freed-memory`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        ns, extras = super().parse_known_args(args, namespace)
        ns.overrides = list(getattr(ns, "overrides", None) or []) + list(extras)
        return ns, []


def split_list(text: str | None) -> list[str] | None:
    """`a, b,c` -> ["a", "b", "c"]; None or empty -> None (all steps)."""
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="stage", required=True, parser_class=_OverrideParser)
    s1 = sub.add_parser("stage1", help="persona-aware behavioural alignment: judge -> pairs -> RM -> GRPO speakers",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_common(s1, "stage1", "cap on optimizer steps of each trainer", "output folder (default checkpoints/<run>)",
                f"comma-separated steps to run: {', '.join(STEPS)} (or grpo:<persona>)")
    s1.add_argument("--extra-pairs", action="append", default=None, help="annotation-tool pairs JSONL {prompt, chosen, rejected}")
    s2 = sub.add_parser("stage2", help="collaborative dialogue optimisation: director GRPO on simulated conversations",
                        description="Train the director with GRPO: dialogue states -> directives -> N-turn rollouts "
                                    "scored by the group judge. Overrides: --field value, --grpo.<field> value.")
    _add_common(s2, "stage2", "cap on GRPO optimizer steps", "run folder (default checkpoints/<run>)",
                f"comma-separated steps: {', '.join(STAGE2_STEPS)}")


def _add_common(p: argparse.ArgumentParser, stage: str, max_steps_help: str, output_help: str, only_help: str) -> None:
    label = "stage-2 recipe" if stage == "stage2" else "recipe"
    p.add_argument("--recipe", default="tiny-cpu", help=f"bundled {label} ({', '.join(list_recipes(stage))}) or a YAML path")
    p.add_argument("--max-steps", type=int, default=None, help=max_steps_help)
    p.add_argument("--output", default=None, help=output_help)
    p.add_argument("--only", default=None, help=only_help)
    p.add_argument("--redo", default=None, help="comma-separated steps to run again, with the steps after them")
    p.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    p.add_argument("--list-recipes", action="store_true", help=f"list bundled {label}s and exit")
    p.add_argument("--no-bars", action="store_true", help="no progress bars (logs only)")
    p.add_argument("--keep-freed-memory", choices=("yes", "no"), default=None,
                   help=f"keep freed memory for reuse in the trainers (default yes; {KEEP_FREED_MEMORY_ENV}=0 says no)")


def cli_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Recipe overrides from `--field value` tokens plus the --max-steps / --output shortcuts."""
    overrides: dict[str, Any] = parse_overrides(list(getattr(args, "overrides", []) or []))
    if args.max_steps is not None:
        overrides["max_steps"] = str(args.max_steps)
    if args.output:
        overrides["output_dir"] = args.output
    return overrides


def parse_overrides(tokens: list[str]) -> dict[str, str]:
    """`["--lora-r", "8", "--grpo.beta=0.04"]` -> `{"lora-r": "8", "grpo.beta": "0.04"}`."""
    out: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--") or len(tok) < 3:
            raise ConfigError(f"Unexpected argument {tok!r}: overrides are written `--field value`.")
        key, eq, value = tok[2:].partition("=")
        if not eq:
            if i + 1 >= len(tokens) or (tokens[i + 1].startswith("--") and len(tokens[i + 1]) > 2):
                raise ConfigError(f"Option --{key} needs a value (`--{key} VALUE`).")
            value = tokens[i + 1]
            i += 1
        out[key] = value
        i += 1
    return out


def keep_freed_memory_flag(args: argparse.Namespace) -> bool:
    """--keep-freed-memory, else the MASCOT_KEEP_FREED_MEMORY switch of this command's environment (default on)."""
    if args.keep_freed_memory is not None:
        return args.keep_freed_memory == "yes"
    return parse_switch(os.environ.get(KEEP_FREED_MEMORY_ENV))


def main(args: argparse.Namespace) -> int:
    if args.stage not in ("stage1", "stage2"):  # argparse already limits the choice
        raise ConfigError(f"Unknown training stage {args.stage!r}. Valid stages: stage1, stage2.")
    if args.list_recipes:
        print("\n".join(list_recipes(args.stage)))
        return 0
    only = split_list(args.only)
    generates = args.stage == "stage2" or not only or "generate" in only
    if not args.print_config and generates and recipe_backend(args.recipe, cli_overrides(args), args.stage) == "llamacpp":
        from mascot.backends.llamacpp.runtime import import_llama_cpp

        # before the recipe imports TRL and torch: llama.cpp keeps its own OpenMP policy
        import_llama_cpp(args.settings.llamacpp_omp_wait_policy)
    cfg = load_recipe(args.recipe, cli_overrides(args), stage=args.stage)
    if getattr(args, "extra_pairs", None):
        cfg.extra_pairs = [*cfg.extra_pairs, *args.extra_pairs]
    if args.print_config:
        print(json.dumps(cfg.to_dict(), indent=2, default=str))
        return 0
    show_bars = not args.no_bars and sys.stderr.isatty()
    keep = keep_freed_memory_flag(args)
    if args.stage == "stage2":
        return _run_stage2(cfg, only, split_list(args.redo), show_bars, keep)
    if cfg.grpo_rollouts == "llamacpp":  # TRL warns on every step that rollout_func is experimental
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from mascot.train.stage1.pipeline import main as run_stage1

    card = run_stage1(cfg, only=only, redo=split_list(args.redo), show_bars=show_bars, keep_freed_memory=keep)
    if not is_main_process():
        return 0
    print(f"[stage1] run card: {cfg.out / 'run_card.json'}")
    rm = card.get("reward_model") or {}
    if rm.get("eval_accuracy") is not None:
        print(f"[stage1] reward model held-out pair accuracy: {rm['eval_accuracy']:.3f} ({rm.get('eval_pairs')} pairs)")
    if card.get("trainable_share_pct") is not None:
        print(f"[stage1] trainable parameters (speaker LoRA): {card['trainable_share_pct']:.4f} %")
    return 0


def _run_stage2(cfg: Any, only: list[str] | None, redo: list[str] | None, show_bars: bool, keep: bool) -> int:
    from mascot.train.stage2.pipeline import main as run_stage2

    card = run_stage2(cfg, only=only, redo=redo, show_bars=show_bars, keep_freed_memory=keep)
    if not is_main_process():
        return 0
    print(f"[stage2] run card: {cfg.stage_dir / 'run_card.json'}; adapter: {cfg.out / 'director'}")
    s = (card.get("grpo") or {}).get("summary") or {}
    for key in ("reward", "rewards/group_reward/mean", "rewards/format_reward/mean"):
        if key in s:
            print(f"[stage2] {key}: {s[key]['first']:.3f} -> {s[key]['last']:.3f} (first/last 3 steps)")
    return 0
