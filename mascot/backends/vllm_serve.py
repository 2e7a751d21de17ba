"""The `vllm serve` command that serves a run to the app's `openai` backend: the base model with every persona's and
the director's LoRA under the names the app asks for (`speaker-<persona key>`, `director`).

    python -m mascot.backends.vllm_serve --run checkpoints/tiny-cpu             # prints the command
    MASCOT_BACKEND=openai MASCOT_OPENAI_BASE_URL=http://GPU-HOST:8000/v1 make run  # the app, served by it
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from mascot.errors import ConfigError
from mascot.files.checkpoints import base_model_of
from mascot.group.live import run_adapters
from mascot.group.personas import load_pack


def lora_modules(run_dir: Path, packs: tuple[str, ...] = ("emotional-support",)) -> dict[str, Path]:
    """Adapter name -> folder, for every adapter of `packs`' personas and the director that `run_dir` holds."""
    found = {name: folder.resolve() for name, (_, folder) in run_adapters(run_dir, [load_pack(n) for n in packs]).items()}
    if not found:
        raise ConfigError(f"{run_dir} holds no adapter (speakers/<persona>/ or director/): train a run first.")
    return found


def serve_command(run_dir: Path, packs: tuple[str, ...] = ("emotional-support",), port: int = 8000,
                  max_lora_rank: int = 64) -> list[str]:
    """`vllm serve BASE --enable-lora --lora-modules NAME=PATH ...` for `run_dir`'s adapters."""
    modules = lora_modules(run_dir, packs)
    bases = {base_model_of(p) for p in modules.values()}
    if len(bases) != 1:
        raise ConfigError(f"{run_dir}'s adapters were trained on different base models ({', '.join(sorted(bases))}).")
    return ["vllm", "serve", bases.pop(), "--port", str(port), "--enable-lora", "--max-loras", str(len(modules)),
            "--max-lora-rank", str(max_lora_rank), "--lora-modules", *(f"{n}={p}" for n, p in modules.items())]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mascot.backends.vllm_serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", default="checkpoints/tiny-cpu", type=Path, help="run folder (default: %(default)s)")
    p.add_argument("--packs", default="emotional-support", help="comma-separated persona packs whose adapters to serve")
    p.add_argument("--port", type=int, default=8000)
    args = p.parse_args(argv)
    try:
        print(shlex.join(serve_command(args.run, tuple(x.strip() for x in args.packs.split(",") if x.strip()),
                                       args.port)))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
