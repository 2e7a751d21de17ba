"""Run cards: `run_card.json` + `README.md` in the run folder (recipe, data, judge, metrics, time taken,
trainable-parameter share, adapters). The admin tab lists runs by their cards."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

from mascot.files.checkpoints import reward_model_dir, speakers_dir
from mascot.train.processes import is_main_process
from mascot.train.progress import write_json


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "trl", "peft", "accelerate"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            pass
    return out


def _folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def build_card(run: Any, seconds: float) -> dict[str, Any]:
    cfg = run.cfg
    steps = {name: info.get("metrics", {}) for name, info in run.manifest.data["steps"].items() if not name.startswith("grpo:")}
    adapters = {p.name: {"path": str((speakers_dir(run.out) / p.key).relative_to(run.out)),
                         "bytes": _folder_size(speakers_dir(run.out) / p.key)} for p in run.personas
                if (speakers_dir(run.out) / p.key / "adapter_config.json").exists()}
    rm_dir = reward_model_dir(run.out)
    step_seconds = {k: v.get("seconds") for k, v in steps.items()}
    grpo = steps.get("grpo", {}).get("adapters", {})
    share = next((m.get("params", {}).get("share_pct") for m in grpo.values() if m.get("params")), None)
    return {
        "run": cfg.run,
        "description": cfg.description,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "recipe": cfg.recipe,
        "config_fingerprint": cfg.fingerprint(),
        "base_model": cfg.model,
        "pack": run.pack.name,
        "personas": [p.name for p in run.personas],
        "data": {"scenarios": cfg.scenarios, "split": cfg.train_split, **{k: steps.get("generate", {}).get(k) for k in
                 ("contexts", "rm_eval_contexts", "groups", "candidates", "empty_candidates")},
                 "extra_pairs": cfg.extra_pairs},
        "judge": steps.get("judge", {}).get("judge", cfg.judge),
        "pairs": steps.get("pairs", {}),
        "reward_model": {k: v for k, v in steps.get("reward_model", {}).items()},
        "grpo": {name: {k: v for k, v in m.items() if k != "curve"} for name, m in grpo.items()},
        "reward_curves": {name: m.get("curve", []) for name, m in grpo.items()},
        "trainable_share_pct": share,
        "speaker_lora_from_config": run.cache.get("lora_share"),
        "adapters": adapters,
        "reward_model_adapter": {"path": "reward_model", "bytes": _folder_size(rm_dir)} if rm_dir.is_dir() else None,
        "seconds": {"total_this_invocation": round(seconds, 1), **step_seconds,
                    "total_all_steps": round(sum(v for v in step_seconds.values() if v), 1)},
        "versions": _versions(),
        "config": cfg.to_dict(),
    }


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "—" if v is None else str(v)


def render_markdown(card: dict[str, Any]) -> str:
    lines = [f"# Run `{card['run']}`", "", card.get("description") or "", "",
             f"- Recipe: `{card['recipe']}` (config {card['config_fingerprint']}), base model `{card['base_model']}`",
             f"- Pack `{card['pack']}`, personas: {', '.join(card['personas'])}",
             f"- Data: `{card['data']['scenarios']}` ({card['data']['split']}), {_fmt(card['data']['contexts'])} contexts, "
             f"{_fmt(card['data']['candidates'])} candidates; extra pairs: {card['data']['extra_pairs'] or 'none'}",
             f"- Judge: {card['judge']}",
             f"- Trainable parameters (speakers): {_fmt(card['trainable_share_pct'])} %",
             f"- Time: {_fmt(card['seconds']['total_all_steps'])} s over all steps", ""]
    p = card.get("pairs") or {}
    if p:
        lines += ["## Preference pairs", "",
                  f"{_fmt(p.get('pairs'))} pairs with gap ≥ δ={_fmt(p.get('delta'))} from {_fmt(p.get('groups'))} groups "
                  f"({_fmt(p.get('invalid'))} invalid verdicts dropped, {_fmt(p.get('below_margin'))} candidate pairs below the margin, "
                  f"mean gap {_fmt(p.get('mean_margin'))}); split {p.get('by_split')}.", ""]
    rm = card.get("reward_model") or {}
    ev = rm.get("eval") or {}
    if rm and ev.get("ci95"):
        kind = "embedding head (all-MiniLM-L6-v2 features)" if rm.get("kind") == "embedding" else "LLM + LoRA"
        by = "; ".join(f"{k} {_fmt(v.get('accuracy'))} on {v.get('n')}" for k, v in (ev.get("by_source") or {}).items())
        lines += ["## Reward model", "",
                  f"Bradley–Terry, {kind}, trained on {_fmt(rm.get('train_pairs'))} pairs. Held-out pair accuracy "
                  f"{_fmt(ev.get('accuracy'))} on {ev.get('n')} pairs from contexts never used in training, 95 % interval "
                  f"[{_fmt(ev['ci95'][0])}, {_fmt(ev['ci95'][1])}] (before training {_fmt(rm.get('eval_accuracy_before'))}); "
                  f"by pair source: {by}.", ""]
    elif rm:
        lines += ["## Reward model", "",
                  f"Bradley–Terry + LoRA, {_fmt(rm.get('steps'))} steps on {_fmt(rm.get('train_pairs'))} pairs. "
                  f"Held-out pair accuracy {_fmt(rm.get('eval_accuracy'))} on {_fmt(rm.get('eval_pairs'))} pairs "
                  f"(before training {_fmt(rm.get('eval_accuracy_before'))}); "
                  f"loss {_fmt(rm.get('first_loss'))} → {_fmt(rm.get('last_loss'))}.", ""]
    if card.get("grpo"):
        lines += ["## GRPO speakers", "", "Mean over the first and last logged steps (up to 10 each, never overlapping; a "
                  "group z-scored component averages 0 by construction; the raw RM / judge means show the trend). "
                  "Curves: `curves/<adapter>.png`.", "",
                  "| adapter | warm start (steps, loss) | GRPO steps | s/GRPO step | reward | format | RM raw | judge raw |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, m in card["grpo"].items():
            s = m.get("summary", {})

            def fl(key: str, s: dict[str, Any] = s) -> str:
                v = s.get(key)
                return f"{v['first']:.3f} → {v['last']:.3f}" if v else "—"

            sft = m.get("sft") or {}
            warm = f"{sft.get('steps')}, {_fmt(sft.get('first_loss'))} → {_fmt(sft.get('last_loss'))}" if sft else "—"
            lines.append(f"| {name} | {warm} | {_fmt(m.get('steps'))} | {_fmt(m.get('seconds_per_step'))} | {fl('reward')} | "
                         f"{fl('rewards/format_reward/mean')} | {fl('persona_rm/raw_mean')} | {fl('judge/raw_mean')} |")
        lines.append("")
    lines += ["## Files", ""]
    for name, a in card.get("adapters", {}).items():
        lines.append(f"- `{a['path']}/` ({a['bytes'] / 1e6:.1f} MB): {name}'s speaker adapter")
    if card.get("reward_model_adapter"):
        lines.append(f"- `reward_model/` ({card['reward_model_adapter']['bytes'] / 1e6:.2f} MB): persona reward model")
    if (Path(card.get("config", {}).get("output_dir") or "") / "sft").is_dir() or card.get("sft_adapters"):
        lines.append("- `sft/<persona>/`: the warm-start (SFT-only) adapters, for the ablation")
    lines += ["", "Full metrics, curves and the exact config: `run_card.json`.", ""]
    return "\n".join(lines)


def write_run_card(run: Any, seconds: float) -> dict[str, Any]:
    card = build_card(run, seconds)
    if not is_main_process():
        return card
    write_json(run.out / "run_card.json", card)
    (run.out / "README.md").write_text(render_markdown(card), encoding="utf-8")
    return card


def read_run_card(run_dir: str | Path) -> dict[str, Any] | None:
    p = Path(run_dir) / "run_card.json"
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
