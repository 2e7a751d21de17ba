"""`python -m mascot <command>` (or the `mascot` console script): chat, train, eval, safety, accept, jobs,
compare-directors.

Each command lives in its own module exposing `add_arguments(parser)` and `main(args) -> int`; only the
chosen command's module is imported, so `mascot chat` never loads the trainers. This is the engine's entry
point: it reads the `MASCOT_*` environment into one `mascot.settings.Settings` (as `args.settings`). User
errors print one clear line (exit 2)."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from mascot.errors import MascotError
from mascot.settings import Settings, apply_process_defaults

COMMANDS = {
    "chat": ("mascot.group.cli", "Talk with the companion group (one message with --message, or interactive)."),
    "train": ("mascot.train.cli", "Run a training stage from a YAML recipe (e.g. `train stage1 --recipe tiny-cpu`)."),
    "eval": ("mascot.evaluation.cli", "Evaluate systems on scenarios with a judge, in the paper's table layout."),
    "safety": ("mascot.safety.cli", "Train (`safety train`) or measure (`safety eval`) the crisis detector."),
    "accept": ("mascot.acceptability.cli",
               "Replies a person would accept: sample replies to label, train and validate the scorer."),
    "jobs": ("mascot.jobs.cli", "The console's job table: submit, list, show, cancel jobs, or keep the queue moving."),
    "compare-directors": ("mascot.evaluation.group_eval",
                          "Group-level evaluation (the same as `eval --level group`): MASCOT vs its ablations and baselines."),
}
# `eval --level group` is the group-level evaluation, a module with its own options
GROUP_LEVEL = "mascot.evaluation.group_eval"


def _level(argv: list[str]) -> str:
    """The value of `--level` on the command line ('individual' when absent)."""
    for i, a in enumerate(argv):
        if a == "--level" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--level="):
            return a.split("=", 1)[1]
    return "individual"


def _chosen(argv: list[str]) -> str | None:
    """The command named on the command line (the first argument that is not an option or an option's value)."""
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "--progress":
            skip = True
        elif not a.startswith("-"):
            return a
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    apply_process_defaults()  # before a command's libraries start an OpenMP thread pool
    parser = argparse.ArgumentParser(prog="mascot", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument("--progress", default=None, metavar="FILE",
                        help="also write progress events to this progress.jsonl (what the admin console follows)")
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = _chosen(argv)
    module = None
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name != chosen:
            continue
        if name == "eval" and _level(argv) == "group":
            module_name = GROUP_LEVEL
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # a command whose module cannot load stays listed but explains why
            p.set_defaults(_missing=str(exc))
            continue
        module.add_arguments(p)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if getattr(args, "_missing", None):
        print(f"error: the {args.command!r} command is unavailable: {args._missing}", file=sys.stderr)
        return 2
    if args.progress:
        from mascot.jobs import events

        events.attach(args.progress)
        events.event("run", "started", message=" ".join(["mascot", *argv]))
    code, message = 1, ""
    try:
        args.settings = Settings.from_env()
        from mascot.files.model_files import use_cache_dir

        use_cache_dir(args.settings.cache_dir)
        code = int(module.main(args) or 0)  # type: ignore[union-attr]
    except MascotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code, message = 2, str(exc)
    except KeyboardInterrupt:
        code = 130
    finally:
        if args.progress:
            events.event("run", "done" if code == 0 else "failed", message=message or f"exit {code}")
    return code


if __name__ == "__main__":
    sys.exit(main())
