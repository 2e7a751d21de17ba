"""Reply stems chosen by the scorer: every candidate opening is tried by its persona on the same openings, each
draw is scored, and a stem set is grown greedily by what best-of-N selection over one draw per stem would show.

    python -m mascot accept stems --candidates stems.yaml --scenarios bundled-train --limit 40 --output runs/stems

The candidates file maps a persona name to a list of stems ("" is the persona without a stem). Every draw is
also written as a `replies.jsonl` record (system `<system>+stem`), so the replies can go to blind labelling.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from tqdm.auto import tqdm

from mascot.acceptability.sampling import Draw, reply_id
from mascot.acceptability.scorer import AcceptabilityScorer, ReplyScore
from mascot.backends import Backend
from mascot.data import Scenario
from mascot.errors import ConfigError
from mascot.evaluation.systems import RunContext, make_system
from mascot.group.dialogue import Directive
from mascot.group.personas import PersonaPack


def load_candidates(path: Path, pack: PersonaPack) -> dict[str, list[str]]:
    """The candidates file: {persona name: [stem, ...]}; names must be the pack's active personas."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"Cannot read the stem candidates {path}: {exc}") from None
    names = [p.name for p in pack.active]
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{path} must map persona names ({', '.join(names)}) to lists of stems.")
    out = {}
    for name, stems in data.items():
        if name not in names:
            raise ConfigError(f"Unknown persona {name!r} in {path}; the pack's personas are: {', '.join(names)}.")
        if not isinstance(stems, list) or not all(isinstance(s, str) for s in stems):
            raise ConfigError(f"{path}: the stems of {name} must be a list of strings.")
        out[name] = list(dict.fromkeys(s.strip() for s in stems))
    return out


def measure_stems(backend: Backend, pack: PersonaPack, scenarios: list[Scenario], candidates: dict[str, list[str]],
                  scorer: AcceptabilityScorer, system: str = "mascot", draws: int = 2, temperature: float = 0.6,
                  seed: int = 0, set_size: int = 3, checkpoints_dir: str = "checkpoints", run: str | None = None,
                  progress: bool = True, output: Path | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Each persona answers each opening `draws` times per candidate stem, under its default directive; returns
    the report (per stem and per valence, and the greedy stem set) and the reply records. With `output`, the
    report and records so far are written after every persona (a stopped run keeps what it drew)."""
    sys_ = make_system(system)
    ctx = RunContext(checkpoints_dir, run, seed, setting=pack.setting, temperature=temperature)
    reason = sys_.prepare(backend, pack, ctx)
    if reason:
        raise ConfigError(f"Cannot measure stems on {system}: {reason}")
    speaker = sys_.speaker(backend, ctx)
    speaker.stems = True
    roster = pack.active
    dialogues = [s.to_dialogue() for s in scenarios]
    records: list[dict[str, Any]] = []
    report: dict[str, Any] = {"system": system, "temperature": temperature, "draws": draws,
                              "scenarios": len(scenarios), "personas": {}}
    for persona in roster:
        if persona.name not in candidates:
            continue
        directive = Directive(persona.name, persona.default_action, persona.default_tone)
        scores: dict[str, list[list[ReplyScore]]] = {}
        for stem in tqdm(candidates[persona.name], desc=persona.name, disable=not progress):
            p = dataclasses.replace(persona, stems=[stem] if stem else [])
            items = [(p, roster, d, directive) for d in dialogues for _ in range(draws)]
            texts = speaker.draw_batch(items, seed, None, redraw=False)
            got = scorer.score_many([(d, persona.name, t) for (_, _, d, _), t in zip(items, texts)])
            scores[stem] = [got[k * draws:(k + 1) * draws] for k in range(len(scenarios))]
            for k, (s, d) in enumerate(zip(scenarios, dialogues)):
                for j in range(draws):
                    draw = Draw(f"{system}+stem", temperature, seed + j)
                    records.append({
                        "id": reply_id(s.id, draw, f"{persona.name}|{stem}"), "scenario": s.id, "emotion": s.emotion,
                        "valence": s.valence, "situation": s.situation, "persona": persona.name,
                        "persona_role": persona.role, "context": [{"speaker": t.speaker, "text": t.text} for t in d.turns],
                        "reply": texts[k * draws + j], "system": draw.system, "temperature": temperature,
                        "seed": seed + j, "stem": stem,
                    })
        report["personas"][persona.name] = {
            "stems": {stem or "(none)": _summary(sc, scenarios) for stem, sc in scores.items()},
            "greedy_set": _greedy_set(scores, set_size),
        }
        if output is not None:
            write(report, records, output)
    return report, records


def _summary(scores: list[list[ReplyScore]], scenarios: list[Scenario]) -> dict[str, Any]:
    flat = [(s.valence, x) for s, row in zip(scenarios, scores) for x in row]

    def stats(xs: list[ReplyScore]) -> dict[str, float]:
        return {"n": len(xs), "score": _mean([x.acceptability for x in xs]), "p_acceptable": _mean([x.p_acceptable for x in xs]),
                "p_unacceptable": _mean([x.p_unacceptable for x in xs]), "faulty": _mean([bool(x.faults) for x in xs])}

    out = stats([x for _, x in flat])
    out["by_valence"] = {v: stats([x for vv, x in flat if vv == v]) for v in sorted({v for v, _ in flat})}
    return out


def _greedy_set(scores: dict[str, list[list[ReplyScore]]], size: int) -> list[dict[str, Any]]:
    """Stems added one at a time, each the one that most raises the mean score of the best draw per opening when
    best-of-N sees the first draw of every stem in the set (what `careful` replies with varied stems show)."""
    stems = list(scores)
    n = len(next(iter(scores.values()), []))
    first = {s: np.array([[row[0].acceptability, row[0].p_unacceptable] for row in scores[s]]) for s in stems}
    chosen: list[str] = []
    steps = []
    best = np.full(n, -1.0)
    best_unacc = np.ones(n)
    while stems and len(chosen) < size:
        gains = {s: np.maximum(best, first[s][:, 0]).mean() for s in stems if s not in chosen}
        if not gains:
            break
        pick = max(gains, key=gains.__getitem__)
        take = first[pick][:, 0] > best
        best = np.where(take, first[pick][:, 0], best)
        best_unacc = np.where(take, first[pick][:, 1], best_unacc)
        chosen.append(pick)
        steps.append({"stems": [s or "(none)" for s in chosen], "score": float(best.mean()),
                      "p_unacceptable": float(best_unacc.mean())})
    return steps


def _mean(xs: list[Any]) -> float:
    return round(float(np.mean(xs)), 4) if xs else float("nan")


def write(report: dict[str, Any], records: list[dict[str, Any]], output: Path) -> None:
    """`report.json` and `replies.jsonl`, each replaced whole (written beside, then renamed)."""
    output.mkdir(parents=True, exist_ok=True)
    for name, text in (("report.json", json.dumps(report, indent=1) + "\n"),
                       ("replies.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))):
        tmp = output / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(output / name)


def by_stem_table(report: dict[str, Any]) -> str:
    """A plain-text table of the report, one row per persona and stem."""
    rows = defaultdict(list)
    for name, p in report["personas"].items():
        for stem, s in sorted(p["stems"].items(), key=lambda kv: -kv[1]["score"]):
            rows[name].append(f"  {stem[:38]:<38} score {s['score']:.3f}  P(acc) {s['p_acceptable']:.3f}  "
                              f"P(not) {s['p_unacceptable']:.3f}  faulty {s['faulty']:.2f}")
    lines = []
    for name, r in rows.items():
        lines += [name, *r, "  greedy set: " + " | ".join(
            f"{'+'.join(s['stems'])} → {s['score']:.3f}" for s in report["personas"][name]["greedy_set"])]
    return "\n".join(lines)
