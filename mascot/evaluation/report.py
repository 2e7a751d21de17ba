"""Aggregate judged rounds into the paper's tables and write them as JSON, CSV and Markdown.

Individual level (paper Table A): per group (valence / OOD / meeting domain) and per persona,
each criterion mapped 1–5 -> 0–100, mean ± std; the Overall row averages the personas of a round
first, then takes mean ± std over rounds (dialogues). Diversity metrics sit beside it.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from mascot.evaluation.metrics import distinct_n, mean_pairwise_cosine, mean_std, self_bleu, to_100
from mascot.judges.base import CRITERIA, Verdict

COLUMNS = {"emotion": "Emotion", "empathy": "Empathy", "consistency": "Consistency", "relevance": "Relevance",
           "contribution": "Contribution", "overall": "Overall",
           # the acceptability scorer's expected shares of replies a person would accept / would not (0-100)
           "acceptable": "Acceptable %", "unacceptable": "Not acceptable %"}
ACCEPT_COLUMNS = ("acceptable", "unacceptable")
GROUP_ORDER = ("positive", "negative", "neutral", "esconv-ood", "academic", "committee", "product")
ALL = "all"
OVERALL = "Overall"


def group_names(groups: set[str]) -> list[str]:
    ordered = [g for g in GROUP_ORDER if g in groups] + sorted(groups - set(GROUP_ORDER))
    return ordered + ([ALL] if len(ordered) > 1 else [])


def score_table(records: list[dict[str, Any]], personas: list[str], mapping: str) -> dict[str, dict[str, dict[str, Any]]]:
    """records: one per round {"group", "verdicts": [(persona, Verdict)], optionally "accept": [(persona,
    {"acceptable": 0-100, "unacceptable": 0-100})]} -> table[group][row][column]."""
    groups = group_names({r["group"] for r in records})
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for g in groups:
        rows = [r for r in records if g == ALL or r["group"] == g]
        table[g] = {}
        for p in personas:
            vs = [v for r in rows for name, v in r["verdicts"] if name == p and v.valid]
            if vs:
                table[g][p] = {c: mean_std([to_100(v.scores[c], mapping) for v in vs]) for c in CRITERIA}
                table[g][p]["overall"] = mean_std([to_100(v.aggregate, mapping) for v in vs])
        per_round: dict[str, list[float]] = {c: [] for c in [*CRITERIA, "overall"]}
        for r in rows:
            vs = [v for _, v in r["verdicts"] if v.valid]
            if vs:
                for c in CRITERIA:
                    per_round[c].append(sum(to_100(v.scores[c], mapping) for v in vs) / len(vs))
                per_round["overall"].append(sum(to_100(v.aggregate, mapping) for v in vs) / len(vs))
        table[g][OVERALL] = {c: mean_std(vals) for c, vals in per_round.items()}
        table[g][OVERALL]["n_rounds"] = len(rows)
        if any(r.get("accept") for r in rows):
            for c in ACCEPT_COLUMNS:
                for p in personas:
                    vals = [a[c] for r in rows for name, a in r.get("accept", []) if name == p]
                    if vals and p in table[g]:
                        table[g][p][c] = mean_std(vals)
                rounds = [[a[c] for _, a in r["accept"]] for r in rows if r.get("accept")]
                table[g][OVERALL][c] = mean_std([sum(v) / len(v) for v in rounds if v])
    return table


def per_scenario_scores(records: list[dict[str, Any]], mapping: str) -> dict[str, dict[str, float]]:
    """scenario id -> {criterion and overall: the round's mean over its personas (0-100)}, for paired tests;
    with several rounds of a scenario (`--repeats`), the mean of its rounds."""
    rows: dict[str, list[dict[str, float]]] = {}
    for r in records:
        vs = [v for _, v in r["verdicts"] if v.valid]
        if vs and r.get("scenario"):
            row = {c: sum(to_100(v.scores[c], mapping) for v in vs) / len(vs) for c in CRITERIA}
            row["overall"] = sum(to_100(v.aggregate, mapping) for v in vs) / len(vs)
            rows.setdefault(r["scenario"], []).append(row)
    return {sid: {k: round(sum(x[k] for x in got) / len(got), 3) for k in got[0]} for sid, got in rows.items()}


PAIRED_COLUMNS = ("overall", "consistency", "relevance")


def paired_tests(systems: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every pair of evaluated systems: per-scenario mean differences and Wilcoxon p-values on
    Overall, Consistency and Relevance (key "A vs B" means A - B)."""
    from mascot.evaluation.metrics import paired_test

    ran = [(n, s) for n, s in systems.items() if s.get("status") == "ok" and s.get("per_scenario")]
    out: dict[str, dict[str, Any]] = {}
    for i, (a, sa) in enumerate(ran):
        for b, sb in ran[i + 1 :]:
            out[f"{a} vs {b}"] = {c: paired_test({k: v[c] for k, v in sa["per_scenario"].items()},
                                                 {k: v[c] for k, v in sb["per_scenario"].items()}) for c in PAIRED_COLUMNS}
    return out


def diversity(records: list[dict[str, Any]], embed: Any) -> dict[str, dict[str, float | None]]:
    """Per group: distinct-1/2 per dialogue, self-BLEU and mean embedding cosine across the
    personas' turns of a round, averaged over rounds (None where a round has a single turn)."""
    out: dict[str, dict[str, float | None]] = {}
    per_round = []
    for r in records:
        texts = [t for t in r["texts"] if t.strip()]
        vecs = embed(texts) if len(texts) > 1 else None
        per_round.append({
            "group": r["group"], "distinct_1": distinct_n(texts, 1), "distinct_2": distinct_n(texts, 2),
            "self_bleu": self_bleu(texts), "embed_sim": mean_pairwise_cosine(vecs) if vecs is not None else None,
        })
    for g in group_names({r["group"] for r in records}):
        rows = [x for x in per_round if g == ALL or x["group"] == g]
        out[g] = {}
        for k in ("distinct_1", "distinct_2", "self_bleu", "embed_sim"):
            vals = [x[k] for x in rows if x[k] is not None]
            out[g][k] = sum(vals) / len(vals) if vals else None
    return out


def fmt(ms: dict[str, Any] | None) -> str:
    if not ms or ms.get("n", 0) == 0 or math.isnan(ms["mean"]):
        return "–"
    return f"{ms['mean']:.1f} ± {ms['std']:.1f}"


def p_text(p: float | None) -> str:
    """A p-value for the tables: three significant digits, "< 1e-05" where the stored value rounds to 0, "–" when
    there is none."""
    return "–" if p is None or math.isnan(p) else ("< 1e-05" if p < 1e-5 else format(p, ".3g"))


def _num(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _rounds_phrase(repeats: int) -> str:
    return "One round" if repeats == 1 else f"{repeats} rounds"


def markdown(results: dict[str, Any]) -> str:
    cfg, systems = results["config"], results["systems"]
    ran = {k: v for k, v in systems.items() if v["status"] == "ok"}
    lines = [
        f"# Evaluation: `{cfg['pack']}` pack on `{cfg['scenarios']}`",
        "",
        f"Judge: {results['judge']}. Scores are 1–5 mapped to 0–100 ({results['mapping']}: "
        + ("(s−1)/4×100" if results["mapping"] == "linear" else "s×20") + "), mean ± std over rounds. "
        f"Backend: {results['backend']}. {_rounds_phrase(cfg.get('repeats', 1))} of {', '.join(results['personas'])} per "
        "scenario" + (" (seeds from --seed; paired tests compare each scenario's mean)." if cfg.get("repeats", 1) > 1 else "."),
        "",
        "## Individual level (all personas)",
    ]
    header = "| System | " + " | ".join(COLUMNS.values()) + " |"
    sep = "|" + "---|" * (len(COLUMNS) + 1)
    groups = next(iter(ran.values()))["table"].keys() if ran else []
    for g in groups:
        n = max((s["table"].get(g, {}).get(OVERALL, {}).get("n_rounds", 0) for s in ran.values()), default=0)
        lines += ["", f"### {g} ({n} scenarios)", "", header, sep]
        for s in ran.values():
            row = s["table"].get(g, {}).get(OVERALL)
            lines.append(f"| {s['label']} | " + " | ".join(fmt(row.get(c) if row else None) for c in COLUMNS) + " |")
    lines += ["", "## Per persona"]
    for g in groups:
        lines += ["", f"### {g}", "", "| System | Persona | " + " | ".join(COLUMNS.values()) + " |", "|---" * (len(COLUMNS) + 2) + "|"]
        for s in ran.values():
            for p in results["personas"]:
                row = s["table"].get(g, {}).get(p)
                if row:
                    lines.append(f"| {s['label']} | {p} | " + " | ".join(fmt(row.get(c)) for c in COLUMNS) + " |")
    lines += ["", "## Diversity (per round, averaged)", "",
              "| System | Group | distinct-1 | distinct-2 | self-BLEU ↓ | embedding sim ↓ |", "|---|---|---|---|---|---|"]
    for s in ran.values():
        for g, d in s["diversity"].items():
            lines.append(f"| {s['label']} | {g} | {_num(d['distinct_1'])} | {_num(d['distinct_2'])} | {_num(d['self_bleu'])} | {_num(d['embed_sim'])} |")
    lines += ["", "## Persona identifiability", "",
              "Leave-one-scenario-out nearest-centroid classification of which persona wrote each turn, on "
              "all-MiniLM-L6-v2 embeddings (chance = 1 / number of personas).", "",
              "| System | accuracy | turns | chance |", "|---|---|---|---|"]
    for s in ran.values():
        ident = s.get("identifiability") or {}
        lines.append(f"| {s['label']} | {_num(ident.get('accuracy'))} | {ident.get('n', '–')} | {_num(ident.get('chance'))} |")
    paired = results.get("paired") or {}
    if paired:
        lines += ["", "## Paired tests over scenarios", "",
                  "Means of both systems on the scenarios both answered, the mean per-scenario difference (first − "
                  "second, 0–100) and the two-sided Wilcoxon signed-rank p-value.", "",
                  "| Comparison | n | " + " | ".join(f"Δ {COLUMNS[c]} (p)" for c in PAIRED_COLUMNS) + " |",
                  "|---|---|" + "---|" * len(PAIRED_COLUMNS)]
        for key, cols in paired.items():
            a, b = key.split(" vs ")
            label = f"{systems.get(a, {}).get('label', a)} vs {systems.get(b, {}).get('label', b)}"
            n = next((v["n"] for v in cols.values()), 0)
            cells = []
            for c in PAIRED_COLUMNS:
                t = cols.get(c) or {}
                cells.append("–" if t.get("mean_diff") is None else
                             f"{t.get('mean_a', float('nan')):.1f} vs {t.get('mean_b', float('nan')):.1f}: "
                             f"{t['mean_diff']:+.1f} (p {p_text(t.get('p'))})")
            lines.append(f"| {label} | {n} | " + " | ".join(cells) + " |")
    notes = [f"- {s['label']}: skipped: {s['reason']}" for s in systems.values() if s["status"] == "skipped"]
    notes += [f"- {s['label']}: {n}" for s in ran.values() for n in s.get("notes", [])]
    notes += [f"- {s['label']}: {s['invalid']} invalid verdict(s) left out" for s in ran.values() if s["invalid"]]
    if notes:
        lines += ["", "## Notes", "", *notes]
    return "\n".join(lines) + "\n"


def write_csv(results: dict[str, Any], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["system", "group", "persona", "metric", "mean", "std", "n"])
        for name, s in results["systems"].items():
            if s["status"] != "ok":
                continue
            for g, rows in s["table"].items():
                for persona, cols in rows.items():
                    for c in COLUMNS:
                        ms = cols.get(c)
                        if ms and ms["n"]:
                            w.writerow([name, g, persona, c, round(ms["mean"], 3), round(ms["std"], 3), ms["n"]])
            for g, d in s["diversity"].items():
                for k, v in d.items():
                    if v is not None:
                        w.writerow([name, g, "", k, round(v, 4), "", ""])
            ident = s.get("identifiability") or {}
            if ident.get("accuracy") is not None:
                w.writerow([name, "all", "", "identifiability", round(ident["accuracy"], 4), "", ident["n"]])


def write_outputs(results: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "results.json", "csv": out_dir / "results.csv", "markdown": out_dir / "results.md"}
    paths["json"].write_text(json.dumps(results, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    write_csv(results, paths["csv"])
    paths["markdown"].write_text(markdown(results), encoding="utf-8")
    return paths


def verdict_record(persona: str, v: Verdict) -> dict[str, Any]:
    return {"persona": persona, "scores": v.scores, "valid": v.valid, "error": v.error}
