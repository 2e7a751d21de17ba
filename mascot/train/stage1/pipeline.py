"""Stage 1 pipeline, `main(cfg)`: generate -> judge -> pairs -> reward_model -> grpo, then the run card.

Each step reads the previous step's file under `<output>/work/`, writes its own atomically, and is
recorded in `<output>/manifest.json`; a finished step is skipped when the command runs again (`redo`
re-runs named steps). Every event also goes to `<output>/progress.jsonl` for the admin tab.

    python -m mascot train stage1 --recipe tiny-cpu
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mascot.errors import ConfigError
from mascot.group.personas import Persona, PersonaPack, load_pack
from mascot.train.processes import world_size
from mascot.train.progress import Manifest, ProgressLog, run_timed_step, skip_finished, write_json
from mascot.train.stage1.config import STEPS, Stage1Config
from mascot.train.stage1.grpo import step_grpo
from mascot.train.stage1.steps import step_generate, step_judge, step_pairs, step_reward_model

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
    keep_freed_memory: bool = True  # the allocator switch, passed on to GRPO worker processes
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

    def need(self, step: str, filename: str) -> Path:
        """The work file `filename` that `step` writes; raises ConfigError naming the step to run first."""
        path = self.work / filename
        if not path.exists():
            raise ConfigError(f"{path} is missing: run the {step!r} step first (e.g. --only {step}).")
        return path

    def bar(self, total: int, desc: str) -> Any:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit="item", disable=not self.show_bars, dynamic_ncols=True)


def open_run(cfg: Stage1Config, show_bars: bool = True, keep_freed_memory: bool = True) -> Run:
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
    return Run(cfg, out, pack, personas, ProgressLog(out / "progress.jsonl"), Manifest(out / "manifest.json"), show_bars,
               keep_freed_memory)


STEP_FUNCS: dict[str, Callable[[Run], dict[str, Any]]] = {
    "generate": step_generate,
    "judge": step_judge,
    "pairs": step_pairs,
    "reward_model": step_reward_model,
    "grpo": step_grpo,
}
assert tuple(STEP_FUNCS) == STEPS


# ------------------------------------------------------------------- main
def main(cfg: Stage1Config, only: list[str] | None = None, redo: list[str] | None = None, show_bars: bool = True,
         keep_freed_memory: bool = True) -> dict[str, Any]:
    """Run (or resume) the Stage-1 pipeline; returns the run card dict. `keep_freed_memory` is the allocator
    switch (mascot/train/allocator.py) the entry point read."""
    from mascot.train.allocator import keep_freed_memory as keep_freed
    from mascot.train.runcard import read_run_card, write_run_card

    for s in [*(only or []), *(redo or [])]:
        if s not in STEPS and not s.startswith("grpo:"):
            raise ConfigError(f"Unknown step {s!r}. Valid steps: {', '.join(STEPS)} (or grpo:<persona key>).")
    keep_freed(keep_freed_memory)  # every trainer step reuses its freed tensors instead of faulting them in again
    if cfg.torch_threads:
        import torch

        torch.set_num_threads(cfg.torch_threads)
    run = open_run(cfg, show_bars, keep_freed_memory)
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
    run.progress.event("run", "started", metrics={"recipe": cfg.recipe, "steps": ",".join(steps), "processes": world_size(),
                                                  "speaker_lora_share_pct": (share or {}).get("share_pct")})
    t_start = time.time()
    ran: list[str] = []
    for step in steps:
        redo_step = step in run.cache["redo"] or (step == "grpo" and any(r.startswith("grpo:") for r in run.cache["redo"]))
        if skip_finished(run.progress, run.manifest, step, redo_step, "stage1"):
            continue
        metrics = run_timed_step(run.progress, step, lambda step=step: STEP_FUNCS[step](run), "stage1")
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
    from mascot.files.model_files import resolve_model
    from mascot.train.modeling import trainable_share_from_config

    try:
        path = resolve_model(cfg.model, progress=False)
        if not (Path(path) / "config.json").exists():
            return None
        from transformers import AutoConfig

        return trainable_share_from_config(AutoConfig.from_pretrained(path, local_files_only=True), cfg.lora_r,
                                           cfg.lora_alpha, cfg.lora_target_modules, cfg.lora_layers)
    except Exception as exc:  # sizing is informative only; never block a run on it
        log.warning("could not compute the LoRA share: %s", exc)
        return None


def expand_redo(redo: list[str], cfg: Stage1Config, personas: list[Persona]) -> set[str]:
    """`--redo STEP` re-runs STEP and every later step (their inputs change); `grpo:<key>` only that adapter."""
    from mascot.train.stage1.speakers import adapter_jobs

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
