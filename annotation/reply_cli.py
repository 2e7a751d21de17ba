"""The reply-label commands of `python -m annotation`: import-replies, import-reply-labels,
export-reply-labels, reply-stats (single replies rated on their own, no A/B pairs)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from annotation.reply_files import write_label_rows
from annotation.reply_stats import ReplySummary, reply_label_summary
from annotation.reply_store import import_reply_items, import_reply_labels, reply_label_rows
from annotation.store import StudyStore

REPLY_COMMANDS = ("import-replies", "import-reply-labels", "export-reply-labels", "reply-stats")


def add_reply_commands(sub: Any) -> None:
    """Add the reply-label subcommands to the CLI's subparsers."""
    p = sub.add_parser("import-replies", help="import a reply items JSONL file (all rows or none)")
    p.add_argument("file", type=Path)
    p.add_argument("--study")
    p = sub.add_parser("import-reply-labels", help="import reply labels, JSONL or CSV (all rows or none)")
    p.add_argument("file", type=Path)
    p.add_argument("--study")
    p = sub.add_parser("export-reply-labels", help="export reply labels joined with their items")
    p.add_argument("--format", choices=("csv", "jsonl"), default="csv")
    p.add_argument("--study")
    p.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    p = sub.add_parser("reply-stats", help="acceptability per system (Wilson 95%% CI) and agreement")
    p.add_argument("--study")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


def format_reply_summary(summary: ReplySummary) -> str:
    """Plain-text report: acceptability per system, persona fit and faults, agreement."""
    if not summary.systems:
        return "No reply items in this study."
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        parts = ["Acceptability per system (count, share % [Wilson 95% CI]):\n"
                 + summary.table().to_string(index=False)]
        details = pd.DataFrame(
            [{"system": s.system, **s.persona_fit, **s.faults} for s in summary.systems]
        )
        parts.append("Persona fit and faults (labels):\n" + details.to_string(index=False))
    parts.append("Agreement on acceptability: " + json.dumps(summary.agreement))
    return "\n\n".join(parts)


def run_reply_command(
    store: StudyStore,
    args: argparse.Namespace,
    study_id: str,
    out: TextIO,
    output: Callable[[Path | None], AbstractContextManager[TextIO]],
) -> None:
    """Execute one reply-label command; `output(path)` opens the export target (stdout for None)."""
    if args.command in ("import-replies", "import-reply-labels"):
        items = args.command == "import-replies"
        report = (import_reply_items if items else import_reply_labels)(store, study_id, args.file)
        print(
            f"Imported {report.added} {'reply items' if items else 'reply labels'} into {study_id!r}"
            f" (systems: {', '.join(report.systems)}).",
            file=out,
        )
        for warning in report.warnings:
            print(f"warning: {warning}", file=out)
    elif args.command == "export-reply-labels":
        frame = reply_label_rows(store, study_id)
        with output(args.output) as fh:
            n = write_label_rows(frame, args.format, fh)
        if args.output:
            print(f"Wrote {n} reply labels to {args.output}.", file=out)
    elif args.command == "reply-stats":
        summary = reply_label_summary(store, study_id)
        print(json.dumps(summary.to_dict(), indent=2) if args.json else format_reply_summary(summary), file=out)
