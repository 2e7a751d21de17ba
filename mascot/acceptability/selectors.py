"""How well a selector picks among labelled draws: every draw of each careful turn labelled blind (`accept sample
--all-draws`), then for each policy the labels of the draw it would show.

    python -m mascot accept selectors --replies runs/accept/fresh6/replies.jsonl --labels LABELS.jsonl \\
        --scorers shipped,runs/accept/scorer-all --output benchmarks/results/acceptability_selectors.json

Policies: `shown` (what the chat showed), `draw0` (the turn's first draw, what one draw from the first stem gives),
`best` (the best label among the draws: what a perfect selector could show), `worst`, and the selection rule of
`mascot.acceptability.selection` run again with each scorer named. Each scorer's AUC (not acceptable against the
rest) is read on every labelled draw. Sign tests pair each policy with `shown` by turn.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mascot.acceptability.labels import LABELS
from mascot.acceptability.report import shares
from mascot.errors import ConfigError
from mascot.group.dialogue import Dialogue, Turn


def turns_of(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Labelled draws by turn (`group`), in draw order; a turn whose shown draw has no label is dropped."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if "group" not in r:
            raise ConfigError(f"Reply {r['id']} has no `group`: sample with `accept sample --all-draws`.")
        groups[r["group"]].append(r)
    return {g: sorted(rs, key=lambda r: r["draw"]) for g, rs in groups.items() if any(r["chosen"] for r in rs)}


def dialogue_of(row: dict[str, Any]) -> Dialogue:
    """The conversation a draw answered, with the opening's situation and emotion as the sampler gave them."""
    return Dialogue([Turn(t["speaker"], t["text"]) for t in row["context"]], row.get("situation", ""),
                    row.get("emotion", ""))


def scorer_choice(selector: Any, persona: Any, rows: list[dict[str, Any]]) -> int:
    """The draw the selection rule would show with this selector's scorer."""
    return selector.choose(dialogue_of(rows[0]), persona, [r["reply"] for r in rows]).index


def selector_report(rows: Sequence[dict[str, Any]], scorers: dict[str, Any], pack_name: str = "emotional-support",
                    boot: int = 1000) -> dict[str, Any]:
    """Shares of the draw each policy shows, sign tests against `shown`, and each scorer's AUC on all draws."""
    from scipy.stats import binomtest

    from mascot.acceptability.selection import Selector
    from mascot.acceptability.training import metrics
    from mascot.group.personas import load_pack

    pack = load_pack(pack_name)
    turns = turns_of(rows)
    rank = {g: [LABELS.index(r["label"]) for r in rs] for g, rs in turns.items()}
    picks: dict[str, dict[str, int]] = {
        "shown": {g: next(i for i, r in enumerate(rs) if r["chosen"]) for g, rs in turns.items()},
        "draw0": {g: 0 for g in turns},
        "best": {g: int(np.argmax(rank[g])) for g in turns},
        "worst": {g: int(np.argmin(rank[g])) for g in turns},
    }
    aucs: dict[str, Any] = {}
    flat = [r for rs in turns.values() for r in rs]
    y = np.array([LABELS.index(r["label"]) for r in flat])
    for name, scorer in scorers.items():
        selector = Selector(scorer)
        picks[f"scorer:{name}"] = {g: scorer_choice(selector, pack.get(rs[0]["persona"]), rs) for g, rs in turns.items()}
        scores = np.array([s.acceptability for s in scorer.score_many([(dialogue_of(r), r["persona"], r["reply"])
                                                                        for r in flat])])
        aucs[name] = metrics(scores, y, boot=boot)
    policies = {}
    for name, chosen in picks.items():
        shown_rows = [{"label": turns[g][i]["label"]} for g, i in chosen.items()]
        policies[name] = shares(shown_rows)
        if name != "shown":
            wins = sum(rank[g][chosen[g]] > rank[g][picks["shown"][g]] for g in turns)
            losses = sum(rank[g][chosen[g]] < rank[g][picks["shown"][g]] for g in turns)
            differ = sum(chosen[g] != picks["shown"][g] for g in turns)
            p = binomtest(wins, wins + losses).pvalue if wins + losses else 1.0
            policies[name]["vs_shown"] = {"turns_differ": differ, "better": wins, "worse": losses,
                                          "sign_p": round(float(p), 5)}
    return {"turns": len(turns), "draws": len(flat),
            "draws_per_turn": {str(k): v for k, v in sorted(Counter(len(rs) for rs in turns.values()).items())},
            "policies": policies, "scorer_auc": aucs}


def load_scorers(names: Sequence[str]) -> dict[str, Any]:
    """`shipped`, scorer folders, or `NAME=FOLDER`, reported by the name given."""
    from mascot.acceptability.scorer import AcceptabilityScorer

    out = {}
    for spec in names:
        name, _, folder = spec.partition("=") if "=" in spec else (spec, "", spec)
        out[name] = AcceptabilityScorer.load(None if folder == "shipped" else Path(folder))
    return out
