"""`python -m mascot accept`: replies a person would accept.

    python -m mascot accept sample --scenarios bundled-train --output runs/accept/train   # replies to label, blind
    python -m mascot accept collect --replies runs/accept/train/replies.jsonl --labels LABELS.jsonl --output DIR
    python -m annotation import-replies DIR/items.jsonl --study S; python -m annotation import-reply-labels ...
    python -m annotation export-reply-labels --study S --format jsonl -o mascot/data/acceptability/train.jsonl
    python -m mascot accept train        # fit the scorer on the training labels (cross-validated by opening)
    python -m mascot accept validate     # the held-out report: scorer vs the offline judge
    python -m mascot accept stems --candidates STEMS.yaml --output DIR   # stems measured by the scorer
    python -m mascot accept distill --replies R.jsonl --output checkpoints/NEW   # speakers on their best replies
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mascot.errors import ConfigError

DEFAULT_DRAWS = ("mascot@0.6#0,mascot@0.6#1,mascot@1.0#2,sft@0.6#0,sft@0.6#1,prompted@0.6#0,prompted@1.0#1,"
                 "zero-shot@0.6#0,zero-shot@0.6#1,few-shot@0.6#0,few-shot@0.6#1,zero-shot@1.0#2")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="accept_command", required=True)
    p = sub.add_parser("sample", help="draw replies from every source and write them blind, shuffled, for labelling")
    p.add_argument("--scenarios", default="bundled-train", help="openings (loader name or dataset path)")
    p.add_argument("--pack", default="emotional-support")
    p.add_argument("--draws", default=DEFAULT_DRAWS, help="comma-separated SYSTEM@TEMPERATURE#SEED (default: %(default)s)")
    p.add_argument("--checkpoints-dir", default="checkpoints")
    p.add_argument("--run", default=None)
    p.add_argument("--tag", default=None, help="appended to every system name as :TAG (e.g. the pack variant drawn from), "
                                                "so samples of the same system can be labelled and compared together")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--batches-of", type=int, default=400, help="replies per blind labelling file")
    p.add_argument("--limit", type=int, default=None, help="only the first N openings by id")
    p.add_argument("--all-draws", action="store_true", help="best-of-N systems: also write the draws not shown, "
                   "marked by turn (`group`), `draw` and `chosen`, so a selector can be scored against all of them")
    p.add_argument("--output", required=True, type=Path)
    p.add_argument("--no-progress", action="store_true")
    p = sub.add_parser("collect", help="turn sampled replies and labellers' files into the annotation store's import files")
    p.add_argument("--replies", required=True, help="comma-separated replies.jsonl files written by `sample`")
    p.add_argument("--labels", required=True, help="comma-separated label JSONL files (id, annotator, acceptability, ...)")
    p.add_argument("--output", required=True, type=Path)
    p = sub.add_parser("train", help="fit the acceptability scorer on exported training labels")
    p.add_argument("--labels", default=None, help="comma-separated export-reply-labels JSONL files, read in order "
                   "(default: the shipped training set)")
    p.add_argument("--output", type=Path, default=None, help="scorer folder (default: the shipped one)")
    p.add_argument("--joint", action="store_true",
                   help="also fine-tune a joint encoder on (message, reply) and stack its log-odds (minutes on a CPU)")
    p.add_argument("--joint-epochs", type=int, default=4)
    p = sub.add_parser("selectors", help="labels of the draw each selector would show, from all draws labelled")
    p.add_argument("--replies", required=True, help="comma-separated replies.jsonl files from `sample --all-draws`")
    p.add_argument("--labels", required=True, help="comma-separated label JSONL files")
    p.add_argument("--scorers", default="shipped", help="comma-separated: shipped, scorer folders, or NAME=FOLDER (default: %(default)s)")
    p.add_argument("--pack", default="emotional-support")
    p.add_argument("--output", type=Path, default=None, help="also write the report as JSON here")
    p = sub.add_parser("compare", help="labelled shares per system with Wilson intervals, and paired sign tests")
    p.add_argument("--replies", required=True, help="comma-separated replies.jsonl files written by `sample`")
    p.add_argument("--labels", required=True, help="comma-separated label JSONL files")
    p.add_argument("--output", type=Path, default=None, help="also write the report as JSON here")
    p.add_argument("--examples", default=None, metavar="BEFORE,AFTER",
                   help="also write the first 20 openings by id with both systems' labelled replies (Markdown)")
    p.add_argument("--examples-output", type=Path, default=Path("docs/acceptability_examples.md"))
    p = sub.add_parser("stems", help="try candidate reply stems per persona on the same openings, scored")
    p.add_argument("--candidates", required=True, type=Path, help="YAML: persona name -> list of stems (\"\" = none)")
    p.add_argument("--scenarios", default="bundled-train", help="openings (loader name or dataset path)")
    p.add_argument("--pack", default="emotional-support")
    p.add_argument("--system", default="mascot", help="whose speakers draw (default: %(default)s)")
    p.add_argument("--draws", type=int, default=2, help="draws per opening and stem")
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set-size", type=int, default=3, help="stems in the greedy set (one draw each)")
    p.add_argument("--limit", type=int, default=None, help="only the first N openings by id")
    p.add_argument("--checkpoints-dir", default="checkpoints")
    p.add_argument("--run", default=None)
    p.add_argument("--output", required=True, type=Path)
    p = sub.add_parser("distill", help="fine-tune the speakers on their most acceptable replies and written "
                       "demonstrations (new run folder)")
    p.add_argument("--replies", default="", help="comma-separated reply files (`stems`/`sample` output, label exports)")
    p.add_argument("--demos", default="", help="comma-separated written demonstrations (JSONL: opening and one reply "
                   "per persona name), taken as targets as they stand")
    p.add_argument("--run", default="tiny-cpu", help="run whose speaker adapters are continued (default: %(default)s)")
    p.add_argument("--checkpoints-dir", default="checkpoints")
    p.add_argument("--output", required=True, type=Path, help="the new run folder (must not exist)")
    p.add_argument("--recipe", default="tiny-cpu", help="Stage-1 recipe whose `sft` settings train (default: %(default)s)")
    p.add_argument("--min-score", type=float, default=0.5, help="drop targets the scorer rates below this (0-1)")
    p.add_argument("--per-context", type=int, default=1, help="targets per persona and conversation")
    p.add_argument("--epochs", type=float, default=None, help="SFT epochs (default: the recipe's)")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--pack", default="emotional-support")
    p = sub.add_parser("validate", help="held-out report: the scorer's AUC and accuracy beside the offline judge's")
    p.add_argument("--labels", type=Path, default=None, help="export-reply-labels JSONL (default: the shipped held-out set)")
    p.add_argument("--scorer", type=Path, default=None, help="scorer folder (default: the shipped one)")
    p.add_argument("--output", type=Path, default=None, help="also write the report as JSON here")


def _paths(text: str) -> list[Path]:
    return [Path(x.strip()) for x in text.split(",") if x.strip()]


def main(args: argparse.Namespace) -> int:
    if args.accept_command == "sample":
        from mascot.acceptability.sampling import Draw, sample_replies
        from mascot.backends import load_backend
        from mascot.data import load_scenarios
        from mascot.group.personas import load_pack

        pack = load_pack(args.pack)
        draws = [Draw.parse(d) for d in args.draws.split(",") if d.strip()]
        scenarios = sorted((s for s in load_scenarios(args.scenarios) if s.setting == pack.setting), key=lambda s: s.id)
        scenarios = scenarios[: args.limit] if args.limit else scenarios
        backend = load_backend("llamacpp", **args.settings.backend_options())
        summary = sample_replies(backend, pack, scenarios, draws, args.output, args.checkpoints_dir, args.run,
                                 args.batch_size, args.batches_of, progress=not args.no_progress, tag=args.tag,
                                 all_draws=args.all_draws)
        print(json.dumps(summary, indent=1))
        return 0
    if args.accept_command == "stems":
        from mascot.acceptability import stems
        from mascot.acceptability.scorer import AcceptabilityScorer
        from mascot.backends import load_backend
        from mascot.data import load_scenarios
        from mascot.group.personas import load_pack

        pack = load_pack(args.pack)
        candidates = stems.load_candidates(args.candidates, pack)
        scenarios = sorted((s for s in load_scenarios(args.scenarios) if s.setting == pack.setting), key=lambda s: s.id)
        scenarios = scenarios[: args.limit] if args.limit else scenarios
        backend = load_backend("llamacpp", **args.settings.backend_options())
        report, records = stems.measure_stems(
            backend, pack, scenarios, candidates, AcceptabilityScorer.load(), args.system, args.draws,
            args.temperature, args.seed, args.set_size, args.checkpoints_dir, args.run, output=args.output)
        stems.write(report, records, args.output)
        print(stems.by_stem_table(report))
        return 0
    if args.accept_command == "distill":
        from mascot.acceptability.distill import distill
        from mascot.files.checkpoints import find_run
        from mascot.group.personas import load_pack

        run_dir = find_run(args.checkpoints_dir, args.run)
        if run_dir is None:
            raise ConfigError(f"No run {args.run!r} under {args.checkpoints_dir}.")
        card = distill(load_pack(args.pack), _paths(args.replies), run_dir, args.output, args.recipe,
                       args.min_score, args.per_context, args.epochs, args.max_steps, demos=_paths(args.demos))
        print(json.dumps(card, indent=1))
        return 0
    if args.accept_command == "collect":
        from mascot.acceptability.labels import to_store_files

        print(json.dumps(to_store_files(_paths(args.replies), _paths(args.labels), args.output), indent=1))
        return 0
    if args.accept_command == "selectors":
        from mascot.acceptability.report import labelled_replies
        from mascot.acceptability.selectors import load_scorers, selector_report

        rows = labelled_replies(_paths(args.replies), _paths(args.labels))
        report = selector_report(rows, load_scorers([s.strip() for s in args.scorers.split(",") if s.strip()]), args.pack)
        _write(report, args.output)
        return 0
    if args.accept_command == "compare":
        from mascot.acceptability.report import compare, labelled_replies

        rows = labelled_replies(_paths(args.replies), _paths(args.labels))
        _write(compare(rows, with_identifiability=True), args.output)
        if args.examples:
            from mascot.acceptability.report import examples_markdown

            before, after = args.examples.split(",")
            args.examples_output.write_text(examples_markdown(rows, before, after), encoding="utf-8")
        return 0
    from mascot.acceptability import training
    from mascot.acceptability.scorer import MODEL_DIR

    if args.accept_command == "train":
        card = training.train_scorer(_paths(args.labels) if args.labels else training.TRAIN_FILE, args.output or MODEL_DIR, joint=args.joint,
                                     joint_epochs=args.joint_epochs)
        print(json.dumps({k: card[k] for k in ("n", "C", "threshold", "cv_accuracy_at_threshold")}, indent=1))
        print(json.dumps(card["cross_validation"][str(card["C"])], indent=1))
        return 0
    _write(training.validate(args.scorer, args.labels or training.HELDOUT_FILE), args.output)
    return 0


def _write(report: dict, output: Path | None) -> None:
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=1))
