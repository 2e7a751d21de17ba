"""Command line for pairwise studies: `python -m annotation --db URL COMMAND ...`.

Commands: list-studies, create-study, link, import-pairs, import-judgments, overview, open/close,
release-annotator, export, export-preferences, stats; for single replies rated on their own:
import-replies, import-reply-labels, export-reply-labels, reply-stats (`annotation.reply_cli`).
User errors print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TextIO

from annotation.errors import InvalidInput
from annotation.exporting import export_judgments, export_preferences
from annotation.frames import load_judgments
from annotation.identity import study_link
from annotation.importing import import_judgments, import_pairs
from annotation.plots import save_preference_chart
from annotation.reply_cli import REPLY_COMMANDS, add_reply_commands, run_reply_command
from annotation.schemas import StudyConfig
from annotation.stats import study_stats
from annotation.store import StudyStore
from mascot.errors import MascotError
from mascot.settings import Settings


def default_db_url() -> str:
    """The app's database: MASCOT_ANNOTATION_DB_URL, else sqlite:///<data_dir>/annotation.db."""
    return Settings.from_env().annotation_db_url


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree (kept separate so tests and docs can inspect it)."""
    parser = argparse.ArgumentParser(prog="python -m annotation", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db", default=None, help="SQLAlchemy URL (default: the app's sqlite file under data_dir)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list-studies", help="list studies with their progress")
    p = sub.add_parser("create-study", help="create a study")
    p.add_argument("--study", required=True, help="study id used in annotator links, e.g. ed-human-1")
    p.add_argument("--name", default="", help="researcher-facing name (never shown to annotators)")
    p.add_argument("--instructions", default="", help="text shown to annotators above each task")
    p.add_argument("--k", type=int, default=2, help="annotators per item (default 2)")
    p.add_argument(
        "--attention-rate", type=float, default=0.0, help="share of tasks that are attention checks"
    )
    p.add_argument("--min-seconds", type=float, default=0.0, help="flag votes faster than this")
    p.add_argument("--hold-minutes", type=float, default=30.0, help="how long an item stays reserved")
    p.add_argument(
        "--items-per-annotator", type=int, default=None, help="tasks per annotator (default: no limit)"
    )
    p.add_argument("--completion-code", default=None, help="code shown on the finish screen (e.g. Prolific)")
    for name, what in (("import-pairs", "pairs JSONL file"), ("import-judgments", "judgments CSV file")):
        p = sub.add_parser(name, help=f"import a {what} (all rows or none)")
        p.add_argument("file", type=Path)
        p.add_argument("--study")
    for name in ("overview", "open", "close"):
        sub.add_parser(name, help=f"{name} a study").add_argument("--study")
    p = sub.add_parser("link", help="print the annotator link to share (it carries the study's key)")
    p.add_argument("--study")
    p.add_argument("--new-key", action="store_true",
                   help="replace the study's key first: the old link admits no new ids (ids taking part continue)")
    p = sub.add_parser("release-annotator", help="let an annotator id start again in a new browser")
    p.add_argument("annotator", help="the annotator id (e.g. a Prolific ID) that lost its browser")
    p.add_argument("--study")
    p = sub.add_parser("export", help="export judgments")
    p.add_argument("--format", choices=("csv", "jsonl"), default="csv")
    p.add_argument("--study")
    p.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    p = sub.add_parser("export-preferences", help="export {prompt, chosen, rejected} JSONL")
    p.add_argument("--study")
    p.add_argument("-o", "--output", type=Path)
    p = sub.add_parser("stats", help="sign tests, Bradley-Terry, agreement, ratings")
    p.add_argument("--study")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--plot", type=Path, help="also write the Figure-7 stacked bar chart as PNG")
    p.add_argument("--exclude-fast", action="store_true", help="drop votes flagged as too fast")
    p.add_argument("--min-attention-accuracy", type=float, default=None, help="drop annotators below this")
    p.add_argument("--bootstrap", type=int, default=200, help="Bradley-Terry bootstrap rounds")
    add_reply_commands(sub)
    return parser


def annotator_link(store: StudyStore, study_id: str, annotator: str = "ANNOTATOR_ID") -> str:
    return study_link("http://HOST:PORT/annotate/", study_id, store.link_key(study_id=study_id), annotator)


def _study_id(store: StudyStore, given: str | None) -> str:
    if given:
        return given
    ids = [s.id for s in store.list_studies()]
    if len(ids) == 1:
        return ids[0]
    raise InvalidInput(
        f"Which study? This database has {len(ids)} studies ({', '.join(ids) or 'none'}); pass --study ID."
        + ("" if ids else " Create one first with `create-study --study ID`.")
    )


def _output(path: Path | None) -> TextIO | nullcontext[TextIO]:
    return open(path, "w", encoding="utf-8", newline="") if path else nullcontext(sys.stdout)


def run(args: argparse.Namespace, out: TextIO) -> None:
    """Execute one parsed command, printing human-readable results to `out`."""
    store = StudyStore(args.db or default_db_url())
    try:
        if args.command == "list-studies":
            for s in store.list_studies():
                o = store.overview(study_id=s.id)
                replies = f"\t{o.reply_items} reply items, {o.reply_labels} reply labels" if o.reply_items else ""
                print(
                    f"{s.id}\t{'open' if s.is_open else 'closed'}\t{o.complete_items}/{o.items} items complete"
                    f"\t{o.judgments} judgments\t{s.name}{replies}",
                    file=out,
                )
            return
        if args.command == "create-study":
            config = store.create_study(
                config=StudyConfig(
                    id=args.study,
                    name=args.name,
                    instructions=args.instructions,
                    annotators_per_item=args.k,
                    attention_rate=args.attention_rate,
                    min_seconds=args.min_seconds,
                    hold_minutes=args.hold_minutes,
                    items_per_annotator=args.items_per_annotator,
                    completion_code=args.completion_code,
                )
            )
            print(
                f"Created study {config.id!r}. Import pairs with: import-pairs FILE.jsonl --study {config.id}\n"
                f"Annotator link: {annotator_link(store, config.id)}",
                file=out,
            )
            return
        study_id = _study_id(store, args.study)
        if args.command in REPLY_COMMANDS:
            run_reply_command(store, args, study_id, out, lambda path: _output(path) if path else nullcontext(out))
        elif args.command in ("import-pairs", "import-judgments"):
            fn = import_pairs if args.command == "import-pairs" else import_judgments
            report = fn(store, study_id=study_id, path=args.file)
            print(
                f"Imported {report.added} {'pairs' if fn is import_pairs else 'judgments'} into {study_id!r}"
                f" (systems: {', '.join(report.systems)}).",
                file=out,
            )
            for warning in report.warnings:
                print(f"warning: {warning}", file=out)
        elif args.command == "link":
            if args.new_key:
                store.new_link_key(study_id=study_id)
                print("The study has a new link key: the old link admits no new annotator ids.", file=out)
            print(annotator_link(store, study_id), file=out)
            print(f"Prolific: {annotator_link(store, study_id, '{{%PROLIFIC_PID%}}')}", file=out)
        elif args.command == "overview":
            print(json.dumps(store.overview(study_id=study_id).__dict__, indent=2), file=out)
        elif args.command in ("open", "close"):
            store.set_open(study_id=study_id, is_open=args.command == "open")
            print(
                f"Study {study_id!r} is now {args.command}{'' if args.command == 'open' else 'd'}.", file=out
            )
        elif args.command == "release-annotator":
            if not store.release_annotator(study_id=study_id, annotator=args.annotator):
                raise InvalidInput(f"No annotator {args.annotator!r} in study {study_id!r}; check the id.")
            print(f"Released {args.annotator!r}: the next browser that opens the study's full link under this id "
                  "takes it over and continues where it stopped.", file=out)
        elif args.command == "export":
            with _output(args.output) as fh:
                n = export_judgments(store, study_id=study_id, fmt=args.format, out=fh)
            if args.output:
                print(f"Wrote {n} judgments to {args.output}.", file=out)
        elif args.command == "export-preferences":
            with _output(args.output) as fh:
                n = export_preferences(store, study_id=study_id, out=fh)
            if args.output:
                print(f"Wrote {n} preference pairs to {args.output}.", file=out)
        elif args.command == "stats":
            stats = study_stats(
                load_judgments(store, study_id=study_id, for_stats=True),
                exclude_fast=args.exclude_fast,
                min_attention_accuracy=args.min_attention_accuracy,
                bootstrap=args.bootstrap,
            )
            if args.plot:
                save_preference_chart(stats.comparisons, args.plot)
            if args.json:
                print(json.dumps(stats.to_dict(), indent=2), file=out)
            else:
                print(format_stats(stats), file=out)
    finally:
        store.close()


def format_stats(stats: object) -> str:
    """Plain-text report: comparisons table, Bradley-Terry, agreement, ratings, position bias."""
    import pandas as pd

    from annotation.stats import StudyStats

    assert isinstance(stats, StudyStats)
    parts = []
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        table = stats.table()
        parts.append(
            "Pairwise preferences (sign test, ties excluded):\n"
            + (table.to_string(index=False) if len(table) else "  no judgments")
        )
        if stats.bradley_terry:
            parts.append(
                "Bradley-Terry (Elo scale, 95% bootstrap CI):\n"
                + pd.DataFrame([r.__dict__ for r in stats.bradley_terry]).to_string(index=False)
            )
        parts.append("Agreement: " + json.dumps(stats.agreement))
        if stats.ratings:
            parts.append(
                "Ratings (Wilcoxon signed-rank):\n"
                + pd.DataFrame([r.__dict__ for r in stats.ratings]).to_string(index=False)
            )
        parts.append("Position bias (left share of decisive votes): " + json.dumps(stats.position_bias))
        parts.append("Excluded: " + json.dumps(stats.excluded))
    return "\n\n".join(parts)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """CLI entry point; returns the exit status (0 ok, 2 user error)."""
    args = build_parser().parse_args(argv)
    try:
        run(args, out or sys.stdout)
    except (MascotError, OSError) as exc:
        message = (
            str(exc)
            if isinstance(exc, MascotError)
            else f"{exc.strerror or exc}: {exc.filename or ''}".strip(": ")
        )
        print(f"error: {message}", file=sys.stderr)
        return 2
    return 0
