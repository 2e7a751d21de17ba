"""`python -m mascot train stage1 --recipe NAME|PATH [--max-steps N] [--output DIR] [--only STEPS] [--FIELD VALUE ...]`

Any recipe field can be overridden as `--field value` (hyphens or underscores), TRL trainer fields as
`--reward_model.<field> value` / `--grpo.<field> value`. Unknown fields and recipes fail with the valid names.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mascot.errors import ConfigError
from mascot.train.configs import STEPS
from mascot.train.recipes import list_recipes, load_recipe, recipe_generation_backend


class _OverrideParser(argparse.ArgumentParser):
    """Keeps unknown `--field value` flags as recipe overrides instead of rejecting them (argparse
    passes a subparser's leftovers up to the top-level parser, which would error out)."""

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
    s1.add_argument("--recipe", default="tiny-cpu", help=f"bundled recipe ({', '.join(list_recipes())}) or a YAML path")
    s1.add_argument("--max-steps", type=int, default=None, help="cap on optimizer steps of each trainer")
    s1.add_argument("--output", default=None, help="output folder (default checkpoints/<run>)")
    s1.add_argument("--only", default=None, help=f"comma-separated steps to run: {', '.join(STEPS)} (or grpo:<persona>)")
    s1.add_argument("--redo", default=None, help="comma-separated steps to run again, with the steps after them")
    s1.add_argument("--extra-pairs", action="append", default=None, help="annotation-tool pairs JSONL {prompt, chosen, rejected}")
    s1.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    s1.add_argument("--list-recipes", action="store_true", help="list bundled recipes and exit")
    s1.add_argument("--no-bars", action="store_true", help="no progress bars (logs only)")
    add_stage2_arguments(sub)


def add_stage2_arguments(sub: Any) -> None:
    from mascot.train.stage2_config import STAGE2_STEPS, list_stage2_recipes

    s2 = sub.add_parser("stage2", help="collaborative dialogue optimisation: director GRPO on simulated conversations",
                        description="Train the director with GRPO: dialogue states -> directives -> N-turn rollouts "
                                    "scored by the group judge. Overrides: --field value, --grpo.<field> value.")
    s2.add_argument("--recipe", default="tiny-cpu", help=f"bundled stage-2 recipe ({', '.join(list_stage2_recipes())}) or a YAML path")
    s2.add_argument("--max-steps", type=int, default=None, help="cap on GRPO optimizer steps")
    s2.add_argument("--output", default=None, help="run folder (default checkpoints/<run>)")
    s2.add_argument("--only", default=None, help=f"comma-separated steps: {', '.join(STAGE2_STEPS)}")
    s2.add_argument("--redo", default=None, help="comma-separated steps to run again")
    s2.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    s2.add_argument("--list-recipes", action="store_true", help="list bundled stage-2 recipes and exit")
    s2.add_argument("--no-bars", action="store_true", help="no progress bars (logs only)")


def cli_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Recipe overrides from `--field value` tokens plus the --max-steps / --output shortcuts."""
    overrides: dict[str, Any] = parse_overrides(list(getattr(args, "overrides", []) or []))
    if args.max_steps is not None:
        overrides["max_steps"] = str(args.max_steps)
    if args.output:
        overrides["output_dir"] = args.output
    return overrides


def main_stage2(args: argparse.Namespace) -> int:
    from mascot.train.stage2_config import list_stage2_recipes, load_stage2_recipe, recipe_rollout_backend

    if args.list_recipes:
        print("\n".join(list_stage2_recipes()))
        return 0
    if not args.print_config and recipe_rollout_backend(args.recipe, cli_overrides(args)) == "llamacpp":
        from mascot.backends.llamacpp import import_llama_cpp

        import_llama_cpp()  # before the recipe imports TRL and torch: llama.cpp keeps its own OpenMP policy
    cfg = load_stage2_recipe(args.recipe, cli_overrides(args))
    if args.print_config:
        print(json.dumps(cfg.to_dict(), indent=2, default=str))
        return 0
    from mascot.train.stage2 import main as run_stage2

    card = run_stage2(cfg, only=split_list(args.only), redo=split_list(args.redo), show_bars=not args.no_bars and sys.stderr.isatty())
    print(f"[stage2] run card: {cfg.stage_dir / 'run_card.json'}; adapter: {cfg.out / 'director'}")
    s = (card.get("grpo") or {}).get("summary") or {}
    for key in ("reward", "rewards/group_reward/mean", "rewards/format_reward/mean"):
        if key in s:
            print(f"[stage2] {key}: {s[key]['first']:.3f} -> {s[key]['last']:.3f} (first/last 3 steps)")
    return 0


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


def main(args: argparse.Namespace) -> int:
    if args.stage == "stage2":
        return main_stage2(args)
    if args.stage != "stage1":  # argparse already limits the choice
        raise ConfigError(f"Unknown training stage {args.stage!r}. Valid stages: stage1, stage2.")
    if args.list_recipes:
        print("\n".join(list_recipes()))
        return 0
    only = split_list(args.only)
    if not args.print_config and (not only or "generate" in only) \
            and recipe_generation_backend(args.recipe, cli_overrides(args)) == "llamacpp":
        from mascot.backends.llamacpp import import_llama_cpp

        import_llama_cpp()  # candidates on llama.cpp: loaded before the recipe imports TRL and torch
    cfg = load_recipe(args.recipe, cli_overrides(args))
    if args.extra_pairs:
        cfg.extra_pairs = [*cfg.extra_pairs, *args.extra_pairs]
    if args.print_config:
        print(json.dumps(cfg.to_dict(), indent=2, default=str))
        return 0
    from mascot.train.stage1 import main as run_stage1

    card = run_stage1(cfg, only=only, redo=split_list(args.redo), show_bars=not args.no_bars and sys.stderr.isatty())
    print(f"[stage1] run card: {cfg.out / 'run_card.json'}")
    rm = card.get("reward_model") or {}
    if rm.get("eval_accuracy") is not None:
        print(f"[stage1] reward model held-out pair accuracy: {rm['eval_accuracy']:.3f} ({rm.get('eval_pairs')} pairs)")
    if card.get("trainable_share_pct") is not None:
        print(f"[stage1] trainable parameters (speaker LoRA): {card['trainable_share_pct']:.4f} %")
    return 0
