"""The group-level evaluation's outputs: the printed table, Markdown, CSV, and pairs for the annotation tool."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from mascot.errors import ConfigError
from mascot.evaluation.report import p_text


def _valences(results: dict[str, Any]) -> list[str]:
    return sorted({v for s in results["systems"].values() for v in (s.get("by_valence") or {})})


def failed(system: dict[str, Any]) -> str:
    """Judge failures as "failed/judged" blocks ("–" for a result file from before they were counted)."""
    if "judge_failures" not in system:
        return "–"
    return f"{system['judge_failures']}/{system['judged_blocks']}"


def render(results: dict[str, Any]) -> str:
    lines = [f"Group-level evaluation — run {results['run']}, {len(results['scenarios'])} held-out scenarios ({results['split']})"
             + (f" x {results['repeats']} rollouts each (scores are per-scenario means)" if results.get("repeats", 1) > 1 else "") + ", "
             f"{results['user']} simulated user{' (' + results['profile'] + ')' if results.get('profile') else ''}, "
             f"{results['user_turns']} user turns, N={results['block_turns']} blocks, {results['judge']}", ""]
    crit = sorted({k for s in results["systems"].values() for k in s["criteria"]})
    vals = _valences(results)
    lines.append(f"{'system':<12} {'group score':>16} " + " ".join(f"{v[:8]:>8}" for v in vals) + " "
                 + " ".join(f"{c[:11]:>11}" for c in crit)
                 + f" {'valid dir.':>10} {'>=2 voices':>10} {'turns/msg':>9} {'repeats':>7} {'acceptable':>10} {'not acc.':>8}"
                 f" {'judge fail':>10}")
    for name, s in results["systems"].items():
        acc = s.get("acceptability") or {}
        bv = s.get("by_valence") or {}
        lines.append(f"{name:<12} {s['mean']:>8.2f} ± {s['std']:<5.2f} " + " ".join(f"{bv.get(v, math.nan):>8.1f}" for v in vals)
                     + " " + " ".join(f"{s['criteria'].get(c, float('nan')):>11.1f}" for c in crit)
                     + f" {100 * s['valid_directive_rate']:>9.1f}% {100 * s['openings_with_2plus_personas']:>9.1f}%"
                     f" {s['persona_turns_per_user_turn']:>9.2f} {s['repeats_in_round']:>7}"
                     f" {acc.get('acceptable', float('nan')):>9.1f}% {acc.get('unacceptable', float('nan')):>7.1f}%"
                     f" {failed(s):>10}")
    if results.get("tests"):
        ref = results.get("reference", "trained")
        lines += ["", f"{ref} vs      mean diff   W/T/L     Wilcoxon p (Holm)   sign p     paired t p   beats at p<0.05 (Holm)?"]
        for b, t in results["tests"].items():
            holm_p = t.get("wilcoxon_p_holm", t["wilcoxon_p"])
            win = "yes" if t["mean_diff"] > 0 and holm_p < 0.05 else "no"
            lines.append(f"{b:<12} {t['mean_diff']:>+9.2f}   {t['wins']}/{t['ties']}/{t['losses']:<6} "
                         f"{t['wilcoxon_p']:>8.4f} ({holm_p:.4f})   {t.get('sign_p', math.nan):>7.4f}   {t['ttest_p']:>8.4f}     {win}")
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    """The table in Markdown: one row per system, scores by valence, the tests against the reference system."""
    vals, tests = _valences(results), results.get("tests") or {}
    head = ["system", "group score", *vals, "acceptable %", "not acceptable %", "vs " + results.get("reference", "–"),
            "Wilcoxon p (Holm)", "sign p", "judge failures"]
    lines = [f"{len(results['scenarios'])} held-out scenarios ({results['split']}), {results['user']} simulated user, "
             f"{results['user_turns']} user turns, N={results['block_turns']} blocks, {results['judge']}"
             + (f", min speakers {results['min_speakers']}" if results.get("min_speakers") else ""), "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, s in results["systems"].items():
        acc, bv, t = s.get("acceptability") or {}, s.get("by_valence") or {}, tests.get(name)
        cells = [f"{name} ({s['label']})" if s.get("label") else name, f"{s['mean']:.1f} ± {s['std']:.1f}",
                 *[f"{bv[v]:.1f}" if v in bv else "–" for v in vals],
                 f"{acc['acceptable']:.1f}" if acc else "–", f"{acc['unacceptable']:.1f}" if acc else "–",
                 f"{t['mean_diff']:+.2f} ({t['wins']}/{t['ties']}/{t['losses']})" if t else "reference",
                 f"{p_text(t['wilcoxon_p'])} ({p_text(t.get('wilcoxon_p_holm'))})" if t else "", p_text(t.get("sign_p")) if t else "",
                 failed(s)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def csv_table(results: dict[str, Any]) -> str:
    """One row per system: score, valence and criterion means, acceptability, the test against the reference."""
    vals = _valences(results)
    crit = sorted({k for s in results["systems"].values() for k in s["criteria"]})
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["system", "label", "mean", "std", *[f"valence_{v}" for v in vals], *crit, "acceptable_pct",
                "unacceptable_pct", "mean_diff_vs_reference", "wins", "ties", "losses", "wilcoxon_p", "wilcoxon_p_holm",
                "sign_p", "ttest_p", "judged_blocks", "judge_failures"])
    for name, s in results["systems"].items():
        acc, bv, t = s.get("acceptability") or {}, s.get("by_valence") or {}, (results.get("tests") or {}).get(name, {})
        w.writerow([name, s.get("label", ""), round(s["mean"], 3), round(s["std"], 3), *[bv.get(v, "") for v in vals],
                    *[s["criteria"].get(c, "") for c in crit], acc.get("acceptable", ""), acc.get("unacceptable", ""),
                    *[t.get(k, "") for k in ("mean_diff", "wins", "ties", "losses", "wilcoxon_p", "wilcoxon_p_holm",
                                             "sign_p", "ttest_p")], s.get("judged_blocks", ""), s.get("judge_failures", "")])
    return out.getvalue()


def export_pairs(results: dict[str, Any], a: str, b: str) -> list[dict[str, Any]]:
    """Systems a and b's dialogues of the same rollouts as annotation pairs ({id, context, a, b}; the user's turns
    as "User"), in the format `python -m annotation import-pairs` reads."""
    missing = [n for n in (a, b) if n not in results["systems"]]
    if missing or a == b:
        raise ConfigError(f"--export-pairs {a},{b}: name two different systems of this run "
                          f"({', '.join(results['systems'])}).")

    def turns(d: dict[str, Any]) -> list[dict[str, str]]:
        return [{"speaker": "User" if t["speaker"] == "user" else t["speaker"], "text": t["text"]} for t in d["turns"]]

    n = len(results["scenarios"])
    pairs = []
    for k, (da, db) in enumerate(zip(results["systems"][a]["dialogues"], results["systems"][b]["dialogues"])):
        sid = results["scenarios"][k % n] + (f"#{k // n}" if k >= n else "")
        pairs.append({"id": f"{sid}:{a}-vs-{b}", "context": da.get("situation") or da["turns"][0]["text"],
                      "a": {"system": a, "dialogue": turns(da)}, "b": {"system": b, "dialogue": turns(db)},
                      "meta": {"scenario": results["scenarios"][k % n], "rollout": k // n}})
    return pairs
