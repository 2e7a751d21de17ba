"""Preference pairs from judged candidates (paper §3.5): keep (y_w, y_l) when s(y_w) - s(y_l) >= delta.

All qualifying pairs of a group are kept (optionally capped, largest gaps first). Candidates whose
verdict is invalid (score None) are dropped and counted; ties never form a pair; duplicate texts are
paired once. Pairs exported by the annotation tool (`{prompt, chosen, rejected}` JSONL) load here too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mascot.errors import ConfigError

EPS = 1e-9  # scores are means of integers; guard the >= delta test against float error


@dataclass
class PairStats:
    groups: int = 0
    candidates: int = 0
    invalid: int = 0
    duplicates: int = 0
    below_margin: int = 0
    guarded: int = 0  # dropped by the per-criterion or length guard
    unacceptable: int = 0  # dropped because the scorer rates the chosen reply below the acceptability floor
    pairs: int = 0
    margins: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        mean = sum(self.margins) / len(self.margins) if self.margins else 0.0
        return {"groups": self.groups, "candidates": self.candidates, "invalid": self.invalid,
                "duplicates": self.duplicates, "below_margin": self.below_margin, "guarded": self.guarded,
                "unacceptable_chosen": self.unacceptable, "pairs": self.pairs,
                "mean_margin": round(mean, 4)}


def group_pairs(texts: Sequence[str], scores: Sequence[float | None], delta: float = 0.5,
                max_pairs: int | None = None, stats: PairStats | None = None) -> list[tuple[int, int, float]]:
    """Index pairs (chosen, rejected, gap) of one group whose aggregate scores differ by >= delta (> 0).

    >>> group_pairs(["a", "b", "c"], [4.0, 3.0, 3.6], delta=0.5)
    [(0, 1, 1.0), (2, 1, 0.6)]
    """
    st = stats or PairStats()
    st.groups += 1
    st.candidates += len(texts)
    keep: list[int] = []
    seen: set[str] = set()
    for i, (t, s) in enumerate(zip(texts, scores)):
        if s is None or s != s:  # invalid verdict (None or NaN)
            st.invalid += 1
            continue
        key = t.strip()
        if key in seen:
            st.duplicates += 1
            continue
        seen.add(key)
        keep.append(i)
    out: list[tuple[int, int, float]] = []
    for a in range(len(keep)):
        for b in range(a + 1, len(keep)):
            i, j = keep[a], keep[b]
            gap = float(scores[i]) - float(scores[j])  # type: ignore[arg-type]
            if abs(gap) + EPS < delta or abs(gap) <= EPS:
                st.below_margin += 1
                continue
            out.append((i, j, round(gap, 6)) if gap > 0 else (j, i, round(-gap, 6)))
    if max_pairs is not None and len(out) > max_pairs:
        out = sorted(out, key=lambda x: -x[2])[:max_pairs]
    st.pairs += len(out)
    st.margins += [g for _, _, g in out]
    return out


def _guarded(g: dict[str, Any], i: int, j: int, criteria: Sequence[str], max_length_ratio: float | None) -> bool:
    """True if chosen i is no worse than rejected j on every guarded criterion and not much longer."""
    crit = g.get("criteria") or []
    for c in criteria:
        ci, cj = (crit[i] or {}) if i < len(crit) else {}, (crit[j] or {}) if j < len(crit) else {}
        if c in ci and c in cj and ci[c] < cj[c]:
            return False
    if max_length_ratio:
        li, lj = len(g["candidates"][i].split()), len(g["candidates"][j].split())
        if li > max_length_ratio * max(lj, 1):
            return False
    return True


def build_pairs(groups: Sequence[dict[str, Any]], delta: float = 0.5, max_pairs_per_group: int | None = None,
                criteria: Sequence[str] = (), max_length_ratio: float | None = None,
                acceptability_floor: float | None = None) -> tuple[list[dict[str, Any]], PairStats]:
    """Pairs for every judged group.

    Each group needs `candidates` (texts) and `scores` (aggregate or None) plus any fields to carry over
    (`group_id`, `persona`, `rm_prompt`, `split`, `criteria`). A pair needs an aggregate gap >= delta and,
    for every name in `criteria`, a chosen reply scored no lower on that criterion (so a fluent but
    off-persona reply never wins on the aggregate alone); with `max_length_ratio`, a chosen reply more
    than that many times longer than the rejected one is not paired (the RM must not learn "longer is
    better"); with `acceptability_floor`, a chosen reply whose `acceptability` (the scorer's, one per candidate in
    the group) is below the floor is not paired (the RM must not learn to prefer one reply a person would reject
    over another). Returns `{prompt, chosen, rejected, margin, ...}` rows.
    """
    stats = PairStats()
    rows: list[dict[str, Any]] = []
    for g in groups:
        found = group_pairs(g["candidates"], g["scores"], delta, None, stats)
        kept = [(i, j, gap) for i, j, gap in found if _guarded(g, i, j, criteria, max_length_ratio)]
        stats.guarded += len(found) - len(kept)
        if acceptability_floor is not None:
            ok = [(i, j, gap) for i, j, gap in kept if g["acceptability"][i] >= acceptability_floor]
            stats.unacceptable += len(kept) - len(ok)
            kept = ok
        if max_pairs_per_group is not None and len(kept) > max_pairs_per_group:
            kept = sorted(kept, key=lambda x: -x[2])[:max_pairs_per_group]
        stats.pairs += len(kept) - len(found)
        stats.margins = stats.margins[: len(stats.margins) - len(found)] + [gap for _, _, gap in kept]
        for i, j, gap in kept:
            rows.append({
                "prompt": g.get("rm_prompt", ""), "chosen": g["candidates"][i], "rejected": g["candidates"][j],
                "score_chosen": g["scores"][i], "score_rejected": g["scores"][j], "gap": gap,
                "group_id": g.get("group_id"), "persona": g.get("persona"), "split": g.get("split", "train"),
                "source": "judge",
            })
    return rows, stats


def cross_persona_pairs(groups: Sequence[dict[str, Any]], per_group: int = 1, min_words: int = 3,
                        rejected_per_persona: int = 1) -> list[dict[str, Any]]:
    """Cross-persona negatives: for the group (scenario, persona P), P's best replies are *chosen* and
    another persona's reply to the same scenario is *rejected* (it is fluent and on topic, but in the
    wrong voice). The rejected replies are that persona's `rejected_per_persona` replies closest in length
    to the chosen one, so the pair separates persona fit from length and generic fluency.

    Groups need `scenario_id`, `persona`, `candidates`, `scores` (None = invalid) and may carry
    `criteria` (the chosen replies are ranked by their `consistency`, then the aggregate), `rm_prompt`,
    `split`, `group_id`. Returns pair rows with `source: "cross_persona"` and `rejected_persona`.
    """
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for g in groups:
        by_scenario.setdefault(g["scenario_id"], []).append(g)

    def usable(g: dict[str, Any]) -> list[int]:
        return [i for i, (t, s) in enumerate(zip(g["candidates"], g["scores"]))
                if s is not None and s == s and len(t.split()) >= min_words]

    rows: list[dict[str, Any]] = []
    for scenario in sorted(by_scenario):
        members = by_scenario[scenario]
        for g in members:
            crit = g.get("criteria") or [None] * len(g["candidates"])
            ranked = sorted(usable(g), key=lambda i: ((crit[i] or {}).get("consistency", 0.0), g["scores"][i]), reverse=True)
            for i in ranked[:per_group]:
                chosen = g["candidates"][i]
                for other in members:
                    if other["persona"] == g["persona"]:
                        continue
                    cands = [j for j in usable(other) if other["candidates"][j].strip() != chosen.strip()]
                    if not cands:
                        continue
                    by_length = sorted(cands, key=lambda j: (abs(len(other["candidates"][j].split()) - len(chosen.split())), j))
                    for j in by_length[:rejected_per_persona]:
                        rows.append({
                            "prompt": g.get("rm_prompt", ""), "chosen": chosen, "rejected": other["candidates"][j],
                            "consistency_chosen": (crit[i] or {}).get("consistency"),
                            "score_chosen": g["scores"][i], "score_rejected": other["scores"][j], "gap": None,
                            "group_id": g.get("group_id"), "persona": g["persona"], "rejected_persona": other["persona"],
                            "split": g.get("split", "train"), "source": "cross_persona",
                        })
    return rows


def keep_persona_separated(rows: Sequence[dict[str, Any]], margin: float) -> list[dict[str, Any]]:
    """Cross-persona pairs the judge agrees with: the chosen reply's consistency with the persona exceeds
    the rejected reply's consistency *judged as that persona* (`consistency_rejected`) by >= margin.
    A small model often ignores its persona card, so another persona's reply may fit this persona just as
    well; such pairs teach the reward model noise and are dropped."""
    out = []
    for r in rows:
        c, x = r.get("consistency_chosen"), r.get("consistency_rejected")
        if c is not None and x is not None and c - x + EPS >= margin:
            out.append({**r, "gap": round(c - x, 6)})
    return out


def load_extra_pairs(path: str | Path) -> list[dict[str, Any]]:
    """Read `{prompt, chosen, rejected[, persona]}` JSONL (the annotation tool's export) into pair rows."""
    from mascot.rewards.persona_rm import rm_prompt

    p = Path(path)
    if not p.exists():
        raise ConfigError(f"Extra pairs file {p} does not exist. Export one with the annotation tool "
                          "(`python -m annotation export-preferences ...`) or drop --extra-pairs.")
    rows = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{p}:{n}: not valid JSON ({exc.msg}); expected {{prompt, chosen, rejected}}.") from exc
        if not isinstance(d, dict) or not all(isinstance(d.get(k), str) for k in ("prompt", "chosen", "rejected")):
            raise ConfigError(f"{p}:{n}: each line needs string fields prompt, chosen and rejected.")
        if d["chosen"].strip() == d["rejected"].strip():
            continue
        rows.append({"prompt": rm_prompt(d.get("persona_description", ""), d["prompt"], d.get("persona")),
                     "chosen": d["chosen"], "rejected": d["rejected"], "gap": None, "group_id": f"extra:{p.name}:{n}",
                     "persona": d.get("persona"), "split": "train", "source": str(p)})
    return rows
