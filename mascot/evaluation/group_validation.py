"""Validate a group judge on the hand-made contrast blocks (`mascot/judges/group_contrasts.yaml`):
for every pair (better block, worse block) the judge should score the better one higher.

    python -m mascot.evaluation.group_validation [--judge offline] [--figure docs/figures/group_judge_validation.png]

Four contrast kinds per scenario: repetitive vs varied, off-topic vs on-topic, one persona monopolising
vs balanced, contradicting vs consistent. Prints the accuracy per kind and overall.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from mascot.group.dialogue import USER, Dialogue, Turn
from mascot.group.personas import Persona, load_pack
from mascot.judges.group import GroupBlock, GroupJudge, load_group_judge

CONTRASTS_FILE = Path(__file__).resolve().parent.parent / "judges" / "group_contrasts.yaml"
KINDS = ("repetitive", "offtopic", "monopoly", "contradict")


@dataclass
class ContrastPair:
    kind: str
    scenario: int
    better: GroupBlock
    worse: GroupBlock


def _block(situation: str, user: str, turns: list[tuple[str, str]], roster: list[Persona]) -> GroupBlock:
    ctx = Dialogue(turns=[Turn(USER, user)], situation=situation)
    return GroupBlock(ctx, [Turn(s, t) for s, t in turns], roster)


def contrast_pairs(path: Path = CONTRASTS_FILE, roster: list[Persona] | None = None) -> list[ContrastPair]:
    """Every (better, worse) pair of the contrast file."""
    roster = roster or load_pack("emotional-support").active
    pairs = []
    for i, sc in enumerate(yaml.safe_load(path.read_text(encoding="utf-8"))):
        good = [tuple(t) for t in sc["good"]]
        mk = functools.partial(_block, sc["situation"], sc["user"], roster=roster)
        speaker, texts = sc["monopoly"]
        pairs += [
            ContrastPair("repetitive", i, mk(good), mk([tuple(t) for t in sc["repetitive"]])),
            ContrastPair("offtopic", i, mk(good), mk([tuple(t) for t in sc["offtopic"]])),
            ContrastPair("monopoly", i, mk(good), mk([(speaker, t) for t in texts])),
            ContrastPair("contradict", i, mk(good + [tuple(sc["consistent_end"])]), mk(good + [tuple(sc["contradict_end"])])),
        ]
    return pairs


def validate(judge: GroupJudge, pairs: list[ContrastPair]) -> dict[str, object]:
    """Accuracy (better scored strictly higher) per kind and overall, with the score margins."""
    verdicts = judge.score_blocks([b for p in pairs for b in (p.better, p.worse)])
    rows = []
    for j, p in enumerate(pairs):
        vb, vw = verdicts[2 * j], verdicts[2 * j + 1]
        ok = vb.valid and vw.valid and vb.aggregate > vw.aggregate
        rows.append({"kind": p.kind, "scenario": p.scenario, "better": round(vb.aggregate, 3), "worse": round(vw.aggregate, 3),
                     "margin": round(vb.aggregate - vw.aggregate, 3), "correct": bool(ok)})
    by_kind = {k: sum(r["correct"] for r in rows if r["kind"] == k) / max(1, sum(r["kind"] == k for r in rows)) for k in KINDS}
    return {"pairs": len(rows), "accuracy": sum(r["correct"] for r in rows) / len(rows), "by_kind": by_kind, "rows": rows}


def plot(result: dict[str, object], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]  # type: ignore[index]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    by_kind = result["by_kind"]  # type: ignore[index]
    axes[0].bar(list(by_kind), [100 * v for v in by_kind.values()], color="#2563eb")
    axes[0].axhline(90, color="#d97706", ls="--", label="target 90 %")
    axes[0].set_ylim(0, 105)
    axes[0].set_ylabel("better block ranked higher (%)")
    axes[0].set_title(f"accuracy {100 * result['accuracy']:.1f} % on {result['pairs']} pairs")  # type: ignore[index]
    axes[0].legend(loc="lower right")
    for k_i, kind in enumerate(KINDS):
        m = [r["margin"] for r in rows if r["kind"] == kind]
        axes[1].scatter([k_i] * len(m), m, alpha=0.6)
    axes[1].axhline(0, color="grey", lw=1)
    axes[1].set_xticks(range(len(KINDS)), KINDS)
    axes[1].set_ylabel("score(better) - score(worse), 1-5 scale")
    axes[1].set_title("margins")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mascot.evaluation.group_validation", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judge", default="offline", help="group judge: offline | llm")
    ap.add_argument("--figure", default=None, help="write a PNG figure here (e.g. docs/figures/group_judge_validation.png)")
    ap.add_argument("--json", default=None, help="write the per-pair results as JSON here")
    args = ap.parse_args(argv)
    judge = load_group_judge(args.judge)
    result = validate(judge, contrast_pairs())
    print(f"group judge: {judge.describe()}")
    print(f"{'kind':<12} accuracy")
    for k, v in result["by_kind"].items():  # type: ignore[union-attr]
        print(f"{k:<12} {100 * v:6.1f} %")
    print(f"{'overall':<12} {100 * result['accuracy']:6.1f} %  ({result['pairs']} pairs)")  # type: ignore[index]
    for r in result["rows"]:  # type: ignore[union-attr]
        if not r["correct"]:
            print(f"  missed: {r['kind']} scenario {r['scenario']}: better {r['better']} vs worse {r['worse']}")
    if args.figure:
        plot(result, Path(args.figure), f"Group judge ({args.judge}) on hand-made contrast blocks")
        print(f"figure: {args.figure}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
