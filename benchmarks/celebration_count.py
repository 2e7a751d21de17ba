"""How often each system's personas celebrate, and how often they celebrate a negative scenario.

Reads the replies an evaluation wrote (`python -m mascot eval ... --output DIR` leaves `DIR/rounds.jsonl`) and
counts, per system and persona, the replies that use a phrase of celebration (`mascot.judges.mood.celebrates`:
"how wonderful", "amazing", "congratulations", ...), over all scenarios and over those whose emotion label is
negative (the evaluation's `negative` group: loss, loneliness, fear, shame, ...). No model is run.

    .venv/bin/python benchmarks/celebration_count.py runs/eval/rounds.jsonl [more.jsonl ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from mascot.judges.mood import celebrates


def count(path: Path) -> dict[str, dict[str, dict[str, int]]]:
    """system -> persona -> {replies, celebrating, negative, celebrating_negative}."""
    out: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("crisis"):
            continue
        negative = row.get("group") == "negative"
        for turn in row.get("turns", []):
            c = out[row["system"]][turn["speaker"]]
            cheer = celebrates(turn.get("text", ""))
            c["replies"] += 1
            c["celebrating"] += cheer
            c["negative"] += negative
            c["celebrating_negative"] += cheer and negative
    return {s: {p: dict(v) for p, v in ps.items()} for s, ps in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rounds", nargs="+", help="rounds.jsonl files written by python -m mascot eval")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    result = {}
    for f in args.rounds:
        path = Path(f)
        if not path.is_file():
            raise SystemExit(f"{path} does not exist: pass the rounds.jsonl an evaluation wrote (its --output folder).")
        result[str(path)] = table = count(path)
        print(f"\n{path}\n| system | persona | celebrating / replies | on negative scenarios |\n|---|---|---|---|")
        for system, personas in table.items():
            for persona, c in personas.items():
                print(f"| {system} | {persona} | {c['celebrating']} / {c['replies']} | "
                      f"{c['celebrating_negative']} / {c['negative']} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
