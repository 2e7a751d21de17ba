"""Speakers fine-tuned on their own most acceptable replies (expert iteration with the scorer as the filter),
and on written demonstrations.

For every conversation a persona answered several times (best-of-N draws with varied stems, sampled label
sets), the target is the draw people would most likely accept: a human label first where one exists
(acceptable, then borderline; a reply labelled not acceptable is never a target), then the acceptability
scorer. Targets the scorer rates below `min_score` are dropped. Each persona's adapter is then trained on its
targets with TRL's SFTTrainer (completion-only loss, the Stage-1 recipe's `sft` settings), continuing from the
run's adapter, and a new run folder is written beside it (the director and everything else copied).

Written demonstrations (`--demos`, see `mascot/data/demonstrations/README.md`) are targets as they stand: one row
per opening with each persona's reply, a persona's context being the opening and the replies written before it.

    python -m mascot accept distill --replies runs/stems/replies.jsonl --labels mascot/data/acceptability/train.jsonl \\
        --run tiny-cpu --output checkpoints/tiny-cpu-accept
"""

from __future__ import annotations

import json
import shutil
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mascot.acceptability.labels import LABELS, read_jsonl
from mascot.acceptability.scorer import AcceptabilityScorer
from mascot.errors import ConfigError
from mascot.group.dialogue import Dialogue, Directive, Turn
from mascot.group.personas import PersonaPack
from mascot.group.prompts import speaker_messages


def _context(row: dict[str, Any]) -> list[dict[str, str]]:
    ctx = row["context"]
    return json.loads(ctx) if isinstance(ctx, str) else ctx


def gather(paths: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """Replies by id from sampler/stem files and label exports; rows with a label add it to their reply (a
    labeller's file of ids and labels only must come after the replies it labels)."""
    out: dict[str, dict[str, Any]] = {}
    for path in paths:
        for r in read_jsonl(path):
            if r.get("reply", "").strip():
                out.setdefault(r["id"], {"id": r["id"], "persona": r["persona"], "context": _context(r),
                                         "reply": r["reply"], "labels": []})
            elif r.get("id") not in out:
                continue
            if r.get("acceptability") in LABELS:
                out[r["id"]]["labels"].append(LABELS.index(r["acceptability"]))
    return out


def choose_targets(rows: dict[str, dict[str, Any]], scorer: AcceptabilityScorer, min_score: float,
                   per_context: int = 1) -> list[dict[str, Any]]:
    """The best `per_context` replies of each (persona, conversation), ranked by human label then scorer."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows.values():
        groups[(r["persona"], json.dumps(r["context"], ensure_ascii=False))].append(r)
    flat = list(rows.values())
    scores = scorer.score_many([(_dialogue(r), r["persona"], r["reply"]) for r in flat])
    for r, s in zip(flat, scores):
        r["score"] = s.acceptability
    targets = []
    for members in groups.values():
        ok = [r for r in members if not r["labels"] or min(r["labels"]) > 0]
        ok.sort(key=lambda r: (max(r["labels"]) if r["labels"] else 0.5, r["score"]), reverse=True)
        targets += [r for r in ok[:per_context] if r["score"] >= min_score or (r["labels"] and min(r["labels"]) == 2)]
    return targets


def demonstration_targets(paths: Sequence[Path], pack: PersonaPack) -> list[dict[str, Any]]:
    """Targets from demonstration files: per row, the active personas' replies in the pack's order."""
    targets = []
    for path in paths:
        for n, row in enumerate(read_jsonl(path), 1):
            opening = str(row.get("opening", "")).strip()
            written = [p for p in pack.active if str(row.get(p.name, "")).strip()]
            if not opening or not written:
                names = ", ".join(p.name for p in pack.active)
                raise ConfigError(f"{path} row {n}: a demonstration needs `opening` and a reply under a persona "
                                  f"name of the pack ({names}).")
            context = [{"speaker": "user", "text": opening}]
            for p in written:
                reply = str(row[p.name]).strip()
                targets.append({"id": f"{row.get('id', f'{path.name}:{n}')}:{p.name}", "persona": p.name,
                                "context": list(context), "reply": reply, "labels": [], "source": "written"})
                context.append({"speaker": p.name, "text": reply})
    return targets


def _dialogue(row: dict[str, Any]) -> Dialogue:
    return Dialogue([Turn(t["speaker"], t["text"]) for t in row["context"]])


def sft_examples(targets: list[dict[str, Any]], pack: PersonaPack) -> dict[str, list[dict[str, Any]]]:
    """Per persona key, prompt-completion rows with the chat's speaker prompt (default directive of the persona)."""
    by_name = {p.name: p for p in pack.active}
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in targets:
        p = by_name.get(t["persona"])
        if p is None:
            continue
        directive = Directive(p.name, p.default_action, p.default_tone)
        out[p.key].append({"prompt": speaker_messages(p, pack.active, _dialogue(t), directive),
                           "completion": [{"role": "assistant", "content": t["reply"]}], "score": t["score"]})
    return dict(out)


def distill(pack: PersonaPack, paths: Sequence[Path], run_dir: Path, output: Path, recipe: str = "tiny-cpu",
            min_score: float = 0.5, per_context: int = 1, epochs: float | None = None, max_steps: int | None = None,
            scorer: AcceptabilityScorer | None = None, demos: Sequence[Path] = ()) -> dict[str, Any]:
    """Fine-tune each persona's adapter of `run_dir` on its chosen targets and the written demonstrations
    `demos`; write the new run to `output`."""
    from transformers import AutoTokenizer
    from trl import SFTTrainer

    from mascot.files.checkpoints import speaker_adapter_dir
    from mascot.files.model_files import resolve_model
    from mascot.train.modeling import base_display_name, save_adapter
    from mascot.train.recipes import load_recipe
    from mascot.train.stage1.speakers import load_trainable_adapter
    from mascot.train.trl_configs import build_sft_config

    if output.resolve() == run_dir.resolve():
        raise ConfigError("--output must be a new run folder: the source run's adapters are read, not overwritten.")
    if output.exists():
        raise ConfigError(f"{output} exists: choose a new run folder (nothing was written).")
    cfg = load_recipe(recipe)
    if epochs is not None:
        cfg.sft["num_train_epochs"] = epochs
    if not paths and not demos:
        raise ConfigError("Nothing to learn from: give sampled replies (--replies), demonstrations (--demos) or both.")
    scorer = scorer or AcceptabilityScorer.load()
    targets = choose_targets(gather(paths), scorer, min_score, per_context) if paths else []
    written = demonstration_targets(demos, pack)
    for t, s in zip(written, scorer.score_many([(_dialogue(t), t["persona"], t["reply"]) for t in written])):
        t["score"] = s.acceptability
    examples = sft_examples(targets + written, pack)
    if not examples:
        raise ConfigError("No target reply passed the filter: label or sample more replies, or lower --min-score.")
    from datasets import Dataset

    tmp = output.with_name(output.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(run_dir, tmp)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.model), local_files_only=True)
    card: dict[str, Any] = {"source_run": str(run_dir), "recipe": recipe, "min_score": min_score,
                            "per_context": per_context, "inputs": [str(p) for p in paths], "demonstrations": [str(p) for p in demos],
                            "epochs": cfg.sft.get("num_train_epochs"), "personas": {}}
    for p in pack.active:
        rows = examples.get(p.key, [])
        src = speaker_adapter_dir(run_dir, p)
        if not rows or not (src / "adapter_config.json").exists():
            card["personas"][p.name] = {"skipped": "no targets" if not rows else f"no adapter at {src}"}
            continue
        t0 = time.time()
        model = load_trainable_adapter(cfg, src)
        args = build_sft_config(cfg, tmp / "work" / f"distill-{p.key}")
        if max_steps is not None:
            args.max_steps = max_steps
        trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(
            [{"prompt": r["prompt"], "completion": r["completion"]} for r in rows]), processing_class=tokenizer)
        trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        save_adapter(trainer.model, speaker_adapter_dir(tmp, p), base_display_name(cfg.model))
        card["personas"][p.name] = {"examples": len(rows), "steps": trainer.state.global_step,
                                    "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
                                    "mean_target_score": round(sum(r["score"] for r in rows) / len(rows), 3),
                                    "seconds": round(time.time() - t0, 1)}
    shutil.rmtree(tmp / "work", ignore_errors=True)
    (tmp / "distill.json").write_text(json.dumps(card, indent=1) + "\n", encoding="utf-8")
    tmp.rename(output)
    return card
