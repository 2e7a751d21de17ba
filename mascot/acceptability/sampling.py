"""Replies to label: every source system answers the same openings, and the replies are written twice:
with their source (the key, for analysis) and blind (id, persona, conversation, reply) in shuffled batches
for the labellers.

    python -m mascot accept sample --scenarios bundled-train --draws mascot@0.6#0,sft@0.6#0,zero-shot@0.6#0 \\
        --output runs/accept/train
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from mascot.backends import Backend
from mascot.data import Scenario
from mascot.errors import ConfigError
from mascot.evaluation.systems import Round, RunContext, make_system
from mascot.group.personas import PersonaPack


@dataclass(frozen=True)
class Draw:
    """One source of replies: a system sampled at a temperature with a seed (`system@temperature#seed`)."""

    system: str
    temperature: float
    seed: int

    @classmethod
    def parse(cls, spec: str) -> Draw:
        name, _, rest = spec.strip().partition("@")
        temp, _, seed = rest.partition("#")
        make_system(name)  # an unknown name or modifier fails here with the valid ones
        try:
            return cls(name, float(temp or 0.6), int(seed or 0))
        except ValueError:
            raise ConfigError(f"Bad draw {spec!r}: write SYSTEM@TEMPERATURE#SEED, e.g. mascot@0.6#0.") from None

    @property
    def name(self) -> str:
        return f"{self.system}@{self.temperature:g}#{self.seed}"


def reply_id(scenario: str, draw: Draw, persona: str, run: str | None = None) -> str:
    """An id that names nothing about the source (a labeller sees only this)."""
    source = draw.name if run is None else f"{draw.name}|{run}"
    return "r" + hashlib.sha1(f"{scenario}|{source}|{persona}".encode()).hexdigest()[:10]


def round_records(r: Round, draw: Draw, run: str | None = None, tag: str | None = None) -> list[dict[str, Any]]:
    """One record per judged persona reply: the conversation before it, the reply, and its source (the system
    name, with `[run]` when the adapters came from a run named explicitly and `:tag` when the sample was tagged,
    e.g. by the pack variant it drew from)."""
    out = []
    system = draw.system if run is None else f"{draw.system}[{run}]"
    system = system if tag is None else f"{system}:{tag}"
    for persona, context, text in r.judged:
        out.append({
            "id": reply_id(r.scenario.id, draw, persona.name, "|".join(x for x in (run, tag) if x) or None),
            "scenario": r.scenario.id, "emotion": r.scenario.emotion,
            "valence": r.scenario.valence, "situation": r.scenario.situation, "persona": persona.name,
            "persona_role": persona.role,
            "context": [{"speaker": t.speaker, "text": t.text} for t in context.turns], "reply": text,
            "system": system, "temperature": draw.temperature,
            "seed": draw.seed,
        })
    return out


BLIND_FIELDS = ("id", "persona", "persona_role", "context", "reply")


def sample_replies(backend: Backend, pack: PersonaPack, scenarios: list[Scenario], draws: list[Draw], output: Path,
                   checkpoints_dir: str = "checkpoints", run: str | None = None, batch_size: int = 16,
                   batches_of: int = 400, progress: bool = True, tag: str | None = None,
                   all_draws: bool = False) -> dict[str, Any]:
    """Generate every draw's round on every scenario; write `replies.jsonl` (with sources) and blind shuffled
    `blind/batch_NN.jsonl` files of `batches_of` replies each. Crisis rounds and empty replies are left out.

    With `all_draws`, a best-of-N system's draws that were not shown are written too, each beside the shown one:
    every record of such a turn carries `group` (scenario and persona), `draw` (its index) and `chosen`, and the
    selector's `acceptability` and `flagged` for it, so labels of all draws can score a selector against the best
    draw there was. A draw identical to an earlier one of its turn is not written twice."""
    output.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    selector = None
    if any(make_system(d.system).best_of > 1 for d in draws):
        from mascot.acceptability.scorer import AcceptabilityScorer
        from mascot.acceptability.selection import Selector

        selector = Selector(AcceptabilityScorer.load())
        selector.record = [] if all_draws else None
    with (output / "replies.jsonl").open("w", encoding="utf-8") as fh:
        for draw in draws:
            system = make_system(draw.system)
            ctx = RunContext(checkpoints_dir, run, draw.seed, setting=pack.setting, temperature=draw.temperature,
                             selector=selector)
            reason = system.prepare(backend, pack, ctx)
            if reason:
                raise ConfigError(f"Cannot draw {draw.name}: {reason}")
            for start in tqdm(range(0, len(scenarios), batch_size), desc=draw.name, disable=not progress):
                recording = selector is not None and selector.record is not None
                if recording:
                    selector.record.clear()
                rounds = system.generate(backend, pack, scenarios[start:start + batch_size], ctx)
                # the batch's choices, by the conversation each draw answered and its persona
                choices = {(tuple(c["context"]), c["persona"]): c for c in selector.record} if recording else {}
                for r in rounds:
                    if r.crisis:
                        continue
                    for rec in round_records(r, draw, run, tag):
                        if rec["reply"].strip() and rec["reply"] != "…":
                            group = with_draws(rec, choices)
                            records += group
                            fh.writelines(json.dumps(x, ensure_ascii=False) + "\n" for x in group)
                fh.flush()
    write_blind(records, output / "blind", batches_of)
    return {"replies": len(records), "draws": [d.name for d in draws], "scenarios": len(scenarios)}


def with_draws(rec: dict[str, Any], choices: dict[tuple, dict[str, Any]]) -> list[dict[str, Any]]:
    """`rec`, and when the selector recorded its turn, the turn's other draws as records of their own."""
    choice = choices.get((tuple((t["speaker"], t["text"]) for t in rec["context"]), rec["persona"]))
    if choice is None or choice["draws"][choice["chosen"]] != rec["reply"]:
        return [rec]
    group = f"{rec['scenario']}|{rec['persona']}"
    out, seen = [], set()
    for j, text in enumerate(choice["draws"]):
        if text in seen or not text.strip():
            continue
        seen.add(text)
        chosen = j == choice["chosen"]
        base = rec if chosen else {**rec, "id": "r" + hashlib.sha1(f"{rec['id']}|draw{j}".encode()).hexdigest()[:10],
                                   "reply": text}
        out.append({**base, "group": group, "draw": j, "chosen": chosen,
                    "acceptability": choice["acceptability"][j], "flagged": choice["flagged"][j]})
    return out


def write_blind(records: list[dict[str, Any]], folder: Path, batches_of: int, seed: int = 0) -> list[Path]:
    """Shuffled batches holding only what a labeller may see."""
    folder.mkdir(parents=True, exist_ok=True)
    blind = [{k: r[k] for k in BLIND_FIELDS} for r in records]
    random.Random(seed).shuffle(blind)
    paths = []
    for n, start in enumerate(range(0, len(blind), batches_of)):
        path = folder / f"batch_{n:02d}.jsonl"
        path.write_text("".join(json.dumps(b, ensure_ascii=False) + "\n" for b in blind[start:start + batches_of]),
                        encoding="utf-8")
        paths.append(path)
    return paths
