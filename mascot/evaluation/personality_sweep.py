"""Personality sweeps of the group-level evaluation, `python -m mascot eval --level group --sweep big5|mbti`: the
same systems rolled out with the prompted simulated user under each of the 10 Big Five profiles or the 16 MBTI types
(`mascot/simusers/profiles.yaml`), a table per profile, and a heatmap of each persona's score per profile like the
paper's MBTI figure.

    python -m mascot eval --level group --sweep mbti --systems mascot --limit 3 --heatmap docs/figures/mbti.png

A persona's score under a profile is the individual judge's Overall (0-100) of that persona's turns in those
dialogues, each judged in its context; the group score is the group judge's, as in the group table.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from mascot.errors import ConfigError
from mascot.jobs.events import tracked

SWEEPS = ("big5", "mbti")
SWEEP_DEFAULT_LIMIT = 3  # scenarios per profile when --limit is not given: 16 MBTI profiles stay under 30 minutes on 2 cores


def sweep_profiles(kind: str) -> list[str]:
    """The profile names of one sweep: `big5-<trait>-<high|low>` (10) or `mbti-<TYPE>` (16)."""
    from mascot.simusers import list_profiles

    if kind not in SWEEPS:
        raise ConfigError(f"Unknown sweep {kind!r}. Valid sweeps: {', '.join(SWEEPS)}.")
    return [p for p in list_profiles() if p.startswith(kind + "-")]


def persona_scores(dialogues: list[dict[str, Any]], pack: Any, judge: Any) -> dict[str, float]:
    """Each persona's mean individual-judge Overall (0-100) over its turns, each judged in the turns before it."""
    from mascot.group.dialogue import Dialogue
    from mascot.judges.base import JudgeItem
    from mascot.judges.group import to_100

    by_name = {p.name: p for p in pack.active}
    items = []
    for raw in dialogues:
        d = Dialogue.from_dict(raw)
        for k, t in enumerate(d.turns):
            if t.speaker in by_name and t.text.strip():
                items.append(JudgeItem(by_name[t.speaker], pack.active, Dialogue(d.turns[:k], d.situation, d.emotion),
                                       t.text, pack.setting))
    scores: dict[str, list[float]] = {}
    for item, verdict in zip(items, judge.score_batch(items)):
        if verdict.valid:
            scores.setdefault(item.persona.name, []).append(to_100(verdict.aggregate))
    return {name: round(statistics.fmean(xs), 2) for name, xs in scores.items()}


def run_sweep(args: argparse.Namespace) -> dict[str, Any]:
    """Every system under every profile of `args.sweep`; the backend, adapters and judges load once."""
    from mascot.evaluation.group_eval import run_compare
    from mascot.judges import load_judge

    profiles = sweep_profiles(args.sweep)
    if args.reuse:
        raise ConfigError("--reuse does not apply to a sweep: each profile rolls out its own dialogues.")
    loaded: dict[str, Any] = {}
    individual = load_judge("offline")
    out: dict[str, Any] = {"sweep": args.sweep, "profiles": {}}
    for profile in tracked(profiles, step=f"sweep {args.sweep}", bar=False):
        one = argparse.Namespace(**{**vars(args), "user": "llm", "profile": profile,
                                    "limit": args.limit or SWEEP_DEFAULT_LIMIT})
        res = run_compare(one, loaded)
        out.setdefault("settings", {k: v for k, v in res.items() if k not in ("systems", "profile", "tests", "reference")})
        out["profiles"][profile] = {
            name: {"mean": round(s["mean"], 2), "by_persona": persona_scores(s["dialogues"], loaded["pack"], individual),
                   "acceptability": s.get("acceptability")}
            for name, s in res["systems"].items()}
        print(f"[sweep] {profile}: " + ", ".join(f"{n} {s['mean']:.1f}" for n, s in out["profiles"][profile].items()),
              flush=True)
    out["personas"] = [p.name for p in loaded["pack"].active]
    return out


def render_sweep(out: dict[str, Any]) -> str:
    systems = list(next(iter(out["profiles"].values())))
    personas = out["personas"]
    head = f"{'profile':<28} " + " ".join(f"{s[:12]:>12}" for s in systems) + "   " + " / ".join(personas) + f" ({systems[0]})"
    lines = [f"Personality sweep ({out['sweep']}): {len(out['settings']['scenarios'])} scenarios per profile, "
             f"{out['settings']['user_turns']} user turns, group judge {out['settings']['judge']}", "", head]
    for profile, row in out["profiles"].items():
        first = row[systems[0]]["by_persona"]
        lines.append(f"{profile:<28} " + " ".join(f"{row[s]['mean']:>12.1f}" for s in systems) + "   "
                     + " / ".join(f"{first.get(p, float('nan')):.1f}" for p in personas))
    return "\n".join(lines)


def save_heatmap(out: dict[str, Any], path: str | Path, system: str | None = None) -> Path:
    """Profiles x personas of one system's per-persona scores, annotated, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    system = system or next(iter(next(iter(out["profiles"].values()))))
    profiles, personas = list(out["profiles"]), out["personas"]
    grid = np.array([[out["profiles"][pr][system]["by_persona"].get(pe, np.nan) for pe in personas] for pr in profiles])
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(personas), 0.9 + 0.32 * len(profiles)))
    im = ax.imshow(grid, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(personas)), personas)
    ax.set_yticks(range(len(profiles)), [p.split("-", 1)[1] for p in profiles])
    for i in range(len(profiles)):
        for j in range(len(personas)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", color="white", fontsize=8)
    ax.set_title(f"{system}: persona score by simulated user ({out['sweep']})", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.05)
    fig.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=120)
    plt.close(fig)
    return target
