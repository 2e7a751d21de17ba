"""What share of a system's replies people would accept, from blind labels: per system the shares of acceptable,
borderline and not acceptable with Wilson 95% intervals, and exact sign tests between systems on replies paired by
opening and persona (which of the two replies got the better label).

    python -m mascot accept compare --replies runs/accept/fresh/replies.jsonl --labels LABELS.jsonl
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

from mascot.acceptability.labels import LABELS, read_jsonl
from mascot.stats import wilson_interval


def labelled_replies(replies: Sequence[Path], labels: Sequence[Path]) -> list[dict[str, Any]]:
    """Sampled replies joined with their first label (a second labeller's count only toward agreement)."""
    first: dict[str, dict[str, Any]] = {}
    for path in labels:
        for row in read_jsonl(path):
            first.setdefault(row["id"], row)
    out = []
    for path in replies:
        for r in read_jsonl(path):
            if r["id"] in first:
                out.append({**r, "label": first[r["id"]]["acceptability"]})
    return out


def shares(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    out: dict[str, Any] = {"n": n}
    for lab in LABELS:
        k = sum(r["label"] == lab for r in rows)
        lo, hi = wilson_interval(k, n) if n else (0.0, 0.0)
        out[lab] = {"count": k, "share": round(k / n, 3) if n else None, "ci95": [round(lo, 3), round(hi, 3)]}
    return out


def identifiability(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Persona identifiability of one system's replies (the evaluation's leave-one-opening-out nearest centroid on
    MiniLM embeddings)."""
    from mascot.acceptability.scorer import minilm_encoder, unit
    from mascot.evaluation.metrics import persona_identifiability

    vecs = unit(minilm_encoder().embed([r["reply"] for r in rows]))
    return persona_identifiability([r["scenario"] for r in rows], [r["persona"] for r in rows], vecs)


def compare(rows: Sequence[dict[str, Any]], with_identifiability: bool = False) -> dict[str, Any]:
    """Per-system shares and pairwise sign tests (key "A vs B": wins of A, losses, ties, two-sided p)."""
    from scipy.stats import binomtest

    systems = sorted({r["system"] for r in rows})
    by_key = {s: {(r["scenario"], r["persona"]): LABELS.index(r["label"]) for r in rows if r["system"] == s}
              for s in systems}
    tests = {}
    for a, b in combinations(systems, 2):
        keys = by_key[a].keys() & by_key[b].keys()
        wins = sum(by_key[a][k] > by_key[b][k] for k in keys)
        losses = sum(by_key[a][k] < by_key[b][k] for k in keys)
        p = binomtest(wins, wins + losses, 0.5).pvalue if wins + losses else 1.0
        tests[f"{a} vs {b}"] = {"pairs": len(keys), "wins": wins, "losses": losses, "ties": len(keys) - wins - losses,
                                "p": round(float(p), 5)}
    out = {"systems": {s: shares([r for r in rows if r["system"] == s]) for s in systems}, "sign_tests": tests}
    if with_identifiability:
        for s in systems:
            out["systems"][s]["identifiability"] = identifiability([r for r in rows if r["system"] == s])
    return out


def examples_markdown(rows: Sequence[dict[str, Any]], before: str, after: str, n: int = 20) -> str:
    """The first `n` openings by id that both systems answered, each with both systems' replies and their labels."""
    by = {(r["system"], r["scenario"]): [] for r in rows}
    for r in rows:
        by[(r["system"], r["scenario"])].append(r)
    openings = sorted({r["scenario"] for r in rows if (before, r["scenario"]) in by and (after, r["scenario"]) in by})
    lines = [f"# Example exchanges: `{before}` and `{after}`", "",
             f"The first {n} openings by id that both answered, with each reply's blind label "
             "(A = acceptable, B = borderline, N = not acceptable).", ""]
    mark = {"acceptable": "A", "borderline": "B", "not_acceptable": "N"}
    for sid in openings[:n]:
        first = by[(before, sid)][0]
        lines += [f"## {sid}", "", f"> {first['context'][0]['text']}", ""]
        for system in (before, after):
            lines.append(f"**{system}**")
            lines.append("")
            for r in sorted(by[(system, sid)], key=lambda x: len(x["context"])):
                lines.append(f"- {r['persona']} [{mark[r['label']]}]: {r['reply']}")
            lines.append("")
    return "\n".join(lines)
