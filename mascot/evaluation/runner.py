"""Run an evaluation: generate one round per scenario for each system (batched through the shared
engine), judge every persona reply, aggregate into the paper's tables, write JSON/CSV/Markdown.

    python -m mascot eval --systems mascot,zero-shot,few-shot --scenarios bundled-test --judge offline
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mascot.acceptability.scorer import AcceptabilityScorer, ReplyScore
from mascot.acceptability.selection import Selector
from mascot.backends import Backend, load_backend
from mascot.data import Scenario, load_scenarios
from mascot.errors import ConfigError
from mascot.evaluation.metrics import MAPPINGS, persona_identifiability
from mascot.evaluation.report import (
    diversity,
    paired_tests,
    per_scenario_scores,
    score_table,
    verdict_record,
    write_outputs,
)
from mascot.evaluation.systems import MODIFIERS, SYSTEMS, Round, RunContext, make_system, valid_system
from mascot.group.dialogue import Dialogue
from mascot.group.personas import load_pack
from mascot.jobs.events import tracked
from mascot.judges import Judge, JudgeItem, load_judge

log = logging.getLogger(__name__)


@dataclass
class EvalConfig:
    """What to evaluate and how (the `python -m mascot eval` flags)."""

    systems: list[str] = field(default_factory=lambda: ["zero-shot", "few-shot"])
    scenarios: str = "bundled-test"
    judge: str = "offline"
    judge_options: dict[str, Any] = field(default_factory=dict)
    pack: str = "emotional-support"
    backend: str = "auto"  # llamacpp on CPU, transformers on a GPU (mascot.backends.resolve_kind)
    model: str = "embedded"
    dtype: str = "auto"
    checkpoints_dir: str = "checkpoints"
    run: str | None = None
    limit: int | None = None  # scenarios per group (valence / OOD / domain), so every column stays filled
    output: str = "runs/eval"
    batch_size: int = 16
    seed: int = 0
    repeats: int = 1  # rounds per scenario, seeds seed, seed+1, ...; paired tests use each scenario's mean
    mapping: str = "linear"
    max_new_tokens: int | None = None
    sc_samples: int = 5
    sc_select: str = "majority"
    scorer: str | None = "shipped"  # acceptability scorer: "shipped", a folder, or None (no acceptability columns)
    progress: bool = True

    def __post_init__(self) -> None:
        unknown = [s for s in self.systems if not valid_system(s)]
        if unknown or not self.systems:
            raise ConfigError(f"Unknown system(s) {', '.join(unknown) or '(none given)'}. Valid systems: {', '.join(SYSTEMS)}, each with optional modifiers {', '.join(MODIFIERS)}.")
        if self.mapping not in MAPPINGS:
            raise ConfigError(f"Unknown score mapping {self.mapping!r}. Valid mappings: {', '.join(MAPPINGS)}.")
        if self.batch_size < 1 or (self.limit is not None and self.limit < 1) or self.sc_samples < 1 or self.repeats < 1:
            raise ConfigError("batch_size, limit, sc_samples and repeats must be positive integers.")


def select_scenarios(cfg: EvalConfig, setting: str) -> list[Scenario]:
    """The scenarios of the pack's setting, at most `limit` per group, in file order."""
    every = load_scenarios(cfg.scenarios)
    chosen = [s for s in every if s.setting == setting]
    if not chosen:
        found = sorted({s.setting for s in every}) or ["none"]
        raise ConfigError(
            f"{cfg.scenarios!r} holds no {setting!r} scenarios (it has: {', '.join(found)}). "
            "Pick scenarios that match the pack, e.g. --pack meeting for QMSum."
        )
    if cfg.limit:
        counts: dict[str, int] = {}
        kept = []
        for s in chosen:
            counts[s.group] = counts.get(s.group, 0) + 1
            if counts[s.group] <= cfg.limit:
                kept.append(s)
        chosen = kept
    return chosen


def judge_rounds(judge: Judge, rounds: list[Round], setting: str, progress: bool, desc: str, chunk: int = 64) -> list[list[Any]]:
    """Verdicts per round, in the order of each round's judged replies."""
    flat = [(i, JudgeItem(p, r.roster, d, text, setting)) for i, r in enumerate(rounds) for p, d, text in r.judged]
    verdicts: list[Any] = []
    for start in tracked(range(0, len(flat), chunk), step=desc, bar=progress, unit="batch"):
        verdicts += judge.score_batch([it for _, it in flat[start : start + chunk]])
    out: list[list[Any]] = [[] for _ in rounds]
    for (i, _), v in zip(flat, verdicts):
        out[i].append(v)
    return out


def load_scorer(which: str | None) -> AcceptabilityScorer | None:
    """The acceptability scorer for the tables' acceptability columns and `+bestN` systems (None: left out)."""
    if not which:
        return None
    if which == "shipped":
        try:
            return AcceptabilityScorer.load()
        except ConfigError as exc:  # a checkout without the shipped scorer still evaluates, without the columns
            log.warning("no acceptability columns: %s", exc)
            return None
    return AcceptabilityScorer.load(which)


def accept_shares(scores: list[ReplyScore]) -> dict[str, float]:
    """The expected shares (0-100) of replies a person would accept / would not, over `scores` (NaN for none)."""
    if not scores:
        return {"acceptable": math.nan, "unacceptable": math.nan}
    return {"acceptable": round(100 * statistics.fmean(s.p_acceptable for s in scores), 2),
            "unacceptable": round(100 * statistics.fmean(s.p_unacceptable for s in scores), 2)}


def accept_rounds(scorer: AcceptabilityScorer, rounds: list[Round]) -> list[list[tuple[str, dict[str, float]]]]:
    """Per round, each judged reply's expected acceptable and not-acceptable shares (0-100) by the scorer."""
    flat = [(i, p.name, d, text) for i, r in enumerate(rounds) for p, d, text in r.judged]
    scores = scorer.score_many([(d, name, text) for _, name, d, text in flat])
    out: list[list[tuple[str, dict[str, float]]]] = [[] for _ in rounds]
    for (i, name, _, _), s in zip(flat, scores):
        out[i].append((name, accept_shares([s])))
    return out


def accept_dialogues(scorer: AcceptabilityScorer, dialogues: list[Dialogue], personas: list[str]) -> dict[str, float]:
    """Every persona turn of whole dialogues scored in its context (the turns before it): the expected shares of
    replies a person would accept / would not (0-100), for the group tables."""
    items = [(Dialogue(d.turns[:k], d.situation, d.emotion), t.speaker, t.text)
             for d in dialogues for k, t in enumerate(d.turns) if t.speaker in personas and t.text.strip()]
    scores = scorer.score_many(items)
    return {**accept_shares(scores), "replies": len(scores)}


def run_eval(cfg: EvalConfig, backend: Backend | None = None, judge: Judge | None = None) -> dict[str, Any]:
    """Evaluate every system in `cfg`; returns the results dict (also written to cfg.output)."""
    pack = load_pack(cfg.pack)
    roster = pack.active
    scenarios = select_scenarios(cfg, pack.setting)
    # the backend first: llama.cpp must start its OpenMP runtime before the judge's torch does (mascot/backends/llamacpp/runtime.py)
    backend = backend or load_backend(cfg.backend, model=cfg.model, dtype=cfg.dtype)
    judge = judge or load_judge(cfg.judge, **cfg.judge_options)
    scorer = load_scorer(cfg.scorer)
    selector = Selector(scorer) if scorer is not None else None
    ctx = RunContext(cfg.checkpoints_dir, cfg.run, cfg.seed, cfg.max_new_tokens, cfg.sc_samples, cfg.sc_select, judge,
                     pack.setting, selector=selector)
    out_dir = Path(cfg.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "config": asdict(cfg), "judge": judge.describe(), "mapping": cfg.mapping, "pack": pack.name,
        "personas": [p.name for p in roster], "backend": backend.info().model,
        "n_scenarios": len(scenarios), "systems": {},
        "acceptability_scorer": (scorer.card.get("trained_on", "") if scorer is not None else None),
    }
    from mascot.judges.embedding import shared_embedder

    rounds_file = (out_dir / "rounds.jsonl").open("w", encoding="utf-8")
    try:
        for name in cfg.systems:
            system = make_system(name)
            t0 = time.time()
            reason = system.prepare(backend, pack, ctx)
            entry: dict[str, Any] = {"label": system.label, "notes": system.notes}
            results["systems"][name] = entry
            if reason:
                print(f"[eval] skipping {name}: {reason}")
                entry.update(status="skipped", reason=reason)
                continue
            rounds: list[Round] = []
            seeds: list[int] = []
            batches = [(k, start) for k in range(cfg.repeats) for start in range(0, len(scenarios), cfg.batch_size)]
            for k, start in tracked(batches, step=f"{name}: generating", bar=cfg.progress, unit="batch"):
                made = system.generate(backend, pack, scenarios[start : start + cfg.batch_size], replace(ctx, seed=cfg.seed + k))
                rounds += made
                seeds += [cfg.seed + k] * len(made)
            verdicts = judge_rounds(judge, rounds, pack.setting, cfg.progress, f"{name}: judging")
            accept = accept_rounds(scorer, rounds) if scorer is not None else [[] for _ in rounds]
            records = []
            turns_for_id: list[tuple[str, str, str]] = []
            for r, vs, seed, acc in zip(rounds, verdicts, seeds, accept):
                turns_for_id += [(r.scenario.id, p.name, text) for p, _, text in r.judged if text.strip()]
                pairs = [(p.name, v) for (p, _, _), v in zip(r.judged, vs)]
                records.append({"group": r.scenario.group, "scenario": r.scenario.id, "verdicts": pairs,
                                "texts": [t.text for t in r.turns if not t.meta.get("crisis")], "accept": acc})
                rounds_file.write(json.dumps({
                    "system": name, "scenario": r.scenario.id, "seed": seed, "group": r.scenario.group, "crisis": r.crisis,
                    "turns": [{"speaker": t.speaker, "text": t.text} for t in r.turns],
                    "verdicts": [verdict_record(p, v) for p, v in pairs],
                    "acceptability": [{"persona": p, **a} for p, a in acc],
                }, ensure_ascii=False) + "\n")
            entry.update(
                status="ok",
                table=score_table(records, [p.name for p in roster], cfg.mapping),
                diversity=diversity(records, shared_embedder().encode),
                per_scenario=per_scenario_scores(records, cfg.mapping),
                identifiability=persona_identifiability(
                    [t[0] for t in turns_for_id], [t[1] for t in turns_for_id],
                    shared_embedder().encode([t[2] for t in turns_for_id])),
                invalid=sum(not v.valid for vs in verdicts for v in vs),
                crisis_rounds=sum(r.crisis for r in rounds),
                n_rounds=len(rounds), time_s=round(time.time() - t0, 1),
            )
    finally:
        rounds_file.close()
    results["paired"] = paired_tests(results["systems"])
    results["outputs"] = {k: str(v) for k, v in write_outputs(results, out_dir).items()}
    results["outputs"]["rounds"] = str(out_dir / "rounds.jsonl")
    return results


def merge_results(dirs: list[str], output: str) -> dict[str, Any]:
    """Combine the systems of earlier evaluations of the same scenario set (their `results.json`) into one
    report with paired tests, e.g. baselines evaluated while training ran and the trained systems after.
    Paired tests use the scenarios both systems answered; a system evaluated in several folders keeps
    its last one."""
    merged: dict[str, Any] | None = None
    for d in dirs:
        path = Path(d) / "results.json"
        if not path.exists():
            raise ConfigError(f"{path} does not exist: pass folders written by `python -m mascot eval --output DIR`.")
        res = json.loads(path.read_text(encoding="utf-8"))
        if merged is None:
            merged = {**res, "systems": {}, "merged_from": []}
        elif res["config"]["scenarios"] != merged["config"]["scenarios"]:
            raise ConfigError(f"{path} was evaluated on {res['config']['scenarios']!r}, not "
                              f"{merged['config']['scenarios']!r}: merge evaluations of the same scenario set.")
        else:  # e.g. a smaller --limit: tables keep their own counts, paired tests use the shared scenarios
            merged["n_scenarios"] = min(merged["n_scenarios"], res["n_scenarios"])
        merged["systems"].update(res["systems"])
        merged["merged_from"].append(str(d))
    if merged is None:
        raise ConfigError("--merge needs at least one evaluation folder.")
    merged["paired"] = paired_tests(merged["systems"])
    merged["outputs"] = {k: str(v) for k, v in write_outputs(merged, Path(output)).items()}
    return merged
