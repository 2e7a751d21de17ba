"""Parallel GRPO workers: the pending per-persona adapters trained as child processes, `grpo_workers` at a time.

Each worker is `python -m mascot train stage1 --recipe <work>/resolved-recipe.yaml --only grpo:<key>`, so it runs
the same code path as a single-process run; it marks its job in the shared manifest, which the parent reloads.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from mascot.errors import ConfigError
from mascot.files.checkpoints import speakers_dir
from mascot.train.allocator import workers_keep_freed_memory
from mascot.train.progress import Manifest, write_json

if TYPE_CHECKING:
    from mascot.train.stage1.pipeline import Run


def train_in_workers(run: Run) -> None:
    """Run pending GRPO adapters as `python -m mascot train stage1 --only grpo:<key>` child processes,
    `cfg.grpo_workers` at a time (logs in work/grpo-<key>.log), then reload the manifest they marked."""
    from mascot.train.stage1.speakers import adapter_jobs

    cfg = run.cfg
    redo = run.cache.get("redo", ())
    pending = [name for name, _, targets in adapter_jobs(cfg, run.personas, speakers_dir(run.out))
               if not (run.manifest.done(f"grpo:{name}") and all((t / "adapter_config.json").exists() for t in targets))
               or f"grpo:{name}" in redo]
    if len(pending) < 2:
        return
    resolved = _resolved_recipe(run)
    running: list[tuple[str, Any, Any]] = []
    failed: list[str] = []
    keep, why = workers_keep_freed_memory(min(cfg.grpo_workers, len(pending)), enabled=run.keep_freed_memory)
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
                "--no-bars", "--keep-freed-memory", "yes" if keep else "no"] \
            + (["--redo", f"grpo:{name}"] if f"grpo:{name}" in redo else [])
        log = (run.work / f"grpo-{name}.log").open("w", encoding="utf-8")
        print(f"[stage1] grpo:{name}: worker started (log {log.name})")
        running.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), log))
    while running:
        reap(block=True)
    run.manifest = Manifest(run.manifest.path)
    # the workers re-ran what --redo asked for: the in-process loop must now skip them, not train them again
    run.cache["redo"] = {r for r in run.cache.get("redo", ()) if r not in {f"grpo:{n}" for n in pending}}
    write_json(run.out / "recipe.json", {"recipe": cfg.recipe, "config": cfg.to_dict()})  # workers wrote theirs
    if failed:
        raise ConfigError(f"GRPO workers failed: {', '.join(failed)}. See the logs under {run.work}.")


def _resolved_recipe(run: Run) -> Path:
    """The run's whole config as a recipe file the workers load: same output folder, one process each."""
    resolved = run.work / "resolved-recipe.yaml"
    resolved.parent.mkdir(parents=True, exist_ok=True)
    data = {k: v for k, v in run.cfg.to_dict().items() if k != "recipe"}
    data["output_dir"] = str(run.out)
    data["grpo_workers"] = 1
    resolved.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return resolved
