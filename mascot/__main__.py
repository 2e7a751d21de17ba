"""`python -m mascot <command>`: chat, train, eval. Each command lives in its own module exposing
`add_arguments(parser)` and `main(args) -> int`; user errors print one clear line (exit 2)."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from mascot.errors import MascotError

COMMANDS = {
    "chat": ("mascot.cli_chat", "Talk with the companion group (one message with --message, or interactive)."),
    "train": ("mascot.train.cli", "Run a training stage from a YAML recipe (e.g. `train stage1 --recipe tiny-cpu`)."),
    "eval": ("mascot.evaluation.cli", "Evaluate systems on scenarios with a judge, in the paper's table layout."),
    "safety": ("mascot.safety_cli", "Train (`safety train`) or measure (`safety eval`) the crisis detector."),
    "compare-directors": ("mascot.evaluation.director_compare",
                          "Trained director vs random, round-robin and prompted on held-out simulated conversations."),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mascot", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    modules = {}
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        try:
            modules[name] = importlib.import_module(module_name)
        except ImportError as exc:  # a command whose module is missing stays listed but explains why
            p.set_defaults(_missing=str(exc))
            continue
        modules[name].add_arguments(p)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if getattr(args, "_missing", None):
        print(f"error: the {args.command!r} command is unavailable: {args._missing}", file=sys.stderr)
        return 2
    try:
        return int(modules[args.command].main(args) or 0)
    except MascotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
