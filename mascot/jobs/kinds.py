"""What the console can launch: each kind of job, its command line, and where its progress and results go.

A job is a kind plus arguments (the command's own flags, as on the command line). The command line is checked by
the command's own argument parser before anything starts, so a wrong flag or value is refused with argparse's
message; training stages also load their recipe with the overrides (the message names the field).

    python -m mascot eval --systems zero-shot --limit 2 ...   <-  JobSpec("eval", ["--systems", "zero-shot", ...])
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mascot.errors import ConfigError, unknown_name


@dataclass(frozen=True)
class Built:
    """A job's command line and the files the console follows."""

    argv: list[str]
    progress_path: Path
    result_path: Path | None  # a JSON (or CSV) report shown as a table when the job has finished


@dataclass(frozen=True)
class Kind:
    """One kind of job: the `mascot` command it runs, its defaults, and how its outputs are placed."""

    name: str
    title: str
    command: tuple[str, ...]  # words after `python -m mascot`
    module: str  # the command's module (its add_arguments checks the flags)
    defaults: tuple[tuple[str, ...], ...] = ()  # (flag,) or (flag, value), added unless the arguments give the flag
    output_flag: str = ""  # the flag naming the report, set to a file in the job folder unless given
    output_name: str = ""  # the report's name inside the output (a folder output)
    heavy: bool = True  # saturates the machine: one heavy job at a time
    place: Callable[[Kind, list[str], Path, str], Built] | None = field(default=None, compare=False)

    def build(self, args: Sequence[str], folder: Path, python: str = sys.executable) -> Built:
        """The command line for `args` (checked by the command's parser) with outputs in `folder`."""
        args = list(args)
        for flag_and_value in self.defaults:
            if not _given(args, flag_and_value[0]):
                args += list(flag_and_value)
        if self.place is not None:
            return self.place(self, args, folder, python)
        result = None
        if self.output_flag:
            if not _given(args, self.output_flag):
                target = folder / ("report" if self.output_name else "report.json")
                args += [self.output_flag, str(target)]
            value = Path(_value(args, self.output_flag))
            result = value / self.output_name if self.output_name else value
        check_arguments(self, args)
        progress = folder / "progress.jsonl"
        argv = [python, "-m", "mascot", "--progress", str(progress), *self.command, *args]
        return Built(argv, progress, result)


def _given(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _value(args: Sequence[str], flag: str) -> str:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    raise ConfigError(f"{flag} needs a value.")


def check_arguments(kind: Kind, args: Sequence[str]) -> argparse.Namespace:
    """Parse `args` with the command's own parser; raise ConfigError with its message instead of exiting."""
    parser = argparse.ArgumentParser(prog=" ".join(("mascot", *kind.command)))
    importlib.import_module(kind.module).add_arguments(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):  # argparse prints usage and exits; keep its one-line reason
            return parser.parse_args([*kind.command[1:], *args])
    except (argparse.ArgumentError, SystemExit) as exc:
        text = err.getvalue().strip().splitlines()
        detail = text[-1] if text else str(exc)
        raise ConfigError(f"{kind.name}: {detail.split('error: ', 1)[-1]}") from None


def _training(stage: str) -> Callable[[Kind, list[str], Path, str], Built]:
    def place(kind: Kind, args: list[str], folder: Path, python: str) -> Built:
        from mascot.train.cli import cli_overrides
        from mascot.train.launch import progress_dir
        from mascot.train.recipes import load_recipe

        ns = check_arguments(kind, args)
        out = load_recipe(ns.recipe, cli_overrides(ns), stage=stage).out  # an unknown or bad field fails here, named
        argv = [python, "-m", "mascot", *kind.command, *args]
        if "--no-bars" not in args:
            argv.append("--no-bars")
        return Built(argv, progress_dir(out, stage) / "progress.jsonl", None)

    return place


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("stage1", "Stage 1: persona alignment (speakers)", ("train", "stage1"), "mascot.train.cli",
         defaults=(("--recipe", "tiny-cpu"),), place=_training("stage1")),
    Kind("stage2", "Stage 2: the director", ("train", "stage2"), "mascot.train.cli",
         defaults=(("--recipe", "tiny-cpu"),), place=_training("stage2")),
    Kind("eval", "Individual evaluation (the paper's table)", ("eval",), "mascot.evaluation.cli",
         defaults=(("--no-progress",),), output_flag="--output", output_name="results.csv"),
    Kind("group-eval", "Group-level evaluation (MASCOT vs ablations and baselines)", ("eval", "--level", "group"),
         "mascot.evaluation.group_eval", output_flag="--json"),
    Kind("sweep", "Personality sweep (Big Five or MBTI simulated users)", ("eval", "--level", "group"),
         "mascot.evaluation.group_eval", defaults=(("--sweep", "big5"),), output_flag="--json"),
    Kind("safety-eval", "Crisis detector evaluation", ("safety", "eval"), "mascot.safety.cli", output_flag="--json"),
)}


def get_kind(name: str) -> Kind:
    if name not in KINDS:
        raise unknown_name("job kind", name, tuple(KINDS))
    return KINDS[name]
