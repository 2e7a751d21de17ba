"""Print the README's current-results tables as Markdown, from the measured JSON files.

Run from anywhere (standard library only):

    python3 scripts/render_results.py                 # every table
    python3 scripts/render_results.py --area safety   # one table
    python3 scripts/render_results.py --write         # replace the tables in README.md
    python3 scripts/render_results.py --check         # exit 1 if README.md differs from the JSON files

In README.md each table sits between `<!-- results:AREA -->` and `<!-- /results:AREA -->`.
The sources are `benchmarks/results/*.json` and `mascot/data/safety/report.json`; each table names its files.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"

# The shipped Stage-1 run (checkpoints/tiny-cpu) is variant 27c of this file: the committed tiny-cpu recipe.
STAGE1_FILE, STAGE1_RUN = "stage1_round27.json", "27c"
# Chat speed on the two CPU kinds the llama.cpp backend serves differently (MASCOT_LLAMACPP_WEIGHTS=auto).
SPEED_FILES = (
    ("2 cores, no AVX512-BF16 (Q8_0 prompts)", "llamacpp_speed_noamx.json"),
    ("2 cores, AVX512-BF16 (formats measured: bf16 prompts)", "llamacpp_speed_amd_epyc_calibrated.json"),
)
DIRECTOR_LATENCY_FILE = "director_latency_llamacpp.json"
SAFETY_REPORT = ROOT / "mascot" / "data" / "safety" / "report.json"
LATENCY = RESULTS / "safety_latency.json"
ANNOTATION_FILE = "annotation_throughput.json"  # optional: benchmarks/annotation_throughput.py --json ...
# The paper's human-evaluation counts (wins of MASCOT out of 200 decisive votes per baseline).
PAPER_SIGN_TESTS = ((138, 200), (137, 200), (151, 200))


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def fmt_p(p: float) -> str:
    """A p-value as the docs write it: 0.41, 0.095, 0.0054, 5e-04, < 1e-05."""
    if p < 1e-5:
        return "< 1e-05"
    if p < 0.001:
        return f"{p:.0e}"
    return f"{p:.2g}"


def signed(x: float, digits: int = 1) -> str:
    return f"{x:+.{digits}f}".replace("-", "−")


def rate_ci(r: dict, digits: int = 3) -> str:
    return f"{r['rate']:.{digits}f} [{r['low']:.{digits}f}, {r['high']:.{digits}f}]"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# -- areas ---------------------------------------------------------------------------------------------------------

def chat_speed() -> str:
    runs = []
    for label, name in SPEED_FILES:
        rows = {r["kind"]: r for r in load(name)["rows"]}
        runs.append((label, rows["llamacpp"], rows["plain"]))
    rows = [
        ["decode with adapters, vs plain llama-cpp-python"]
        + [f"{b['decode_tok_s'] / p['decode_tok_s']:.2f}× ({b['decode_tok_s']:.0f} tok/s)" for _, b, p in runs]
        + ["≥ 0.95×"],
        ["first token, trained director included (median)"] + [f"{b['first_token_s']:.2f} s" for _, b, _ in runs]
        + ["≤ 0.4 s"],
        ["group turn, trained director, 3 speakers"] + [f"{b['group_turn_s']:.1f} s" for _, b, _ in runs] + ["≤ 4 s"],
        ["batched vs one at a time: 16 different chats / 8 samples of one"]
        + [f"{b['batched_speedup']:.2f}× / " + (f"{b['samples8_batched_speedup']:.2f}×" if "samples8_batched_speedup" in b
                                                else "–") for _, b, _ in runs]
        + ["≥ 2× / ≥ 3×"],
        ["peak memory (3 speakers, director, safety)"] + [f"{b['peak_rss_mb']:,.0f} MB" for _, b, _ in runs] + ["–"],
    ]
    out = table(["llama.cpp backend, embedded model"] + [label for label, _, _ in runs] + ["target"], rows)
    d = load(DIRECTOR_LATENCY_FILE)["modes"]["trained (choose)"]
    files = ", ".join(f"`benchmarks/results/{name}`" for _, name in SPEED_FILES)
    return (f"{out}\n\nThe trained director's decision is part of the first token: median "
            f"{d['first_decision_median_s']:.2f} s, p95 {d['first_decision_p95_s']:.2f} s. "
            f"Sources: {files}, `benchmarks/results/{DIRECTOR_LATENCY_FILE}`.")


def stage1() -> str:
    data = load(STAGE1_FILE)
    run = data["rounds"][STAGE1_RUN]
    rows = []
    for name, e in run["eval"].items():
        t, vs = e["table"], e["mascot_vs"]
        c, r, g = vs["zero-shot"]["consistency"], vs["zero-shot"]["relevance"], vs["sft"]["consistency"]
        rows.append([
            f"`{name}` ({e['n_scenarios']})",
            " / ".join(f"{t[s]['overall']:.1f}" for s in ("zero-shot", "few-shot", "sft")),
            f"**{t['mascot']['overall']:.1f}**",
            f"{signed(c['diff'])} ({fmt_p(c['p'])})",
            f"{signed(r['diff'])} ({fmt_p(r['p'])})",
            f"{signed(g['diff'])} ({fmt_p(g['p'])})",
            f"{e['identifiability']['mascot']:.2f} / {e['identifiability']['zero-shot']:.2f}",
        ])
    out = table(["set (scenarios)", "Overall: Zero-Shot / Few-Shot / SFT", "MASCOT", "Consistency vs ZS (p)",
                 "Relevance vs ZS (p)", "GRPO over SFT: Consistency (p)", "identifiability MASCOT / ZS"], rows)
    rm = run["reward_model"]
    checks = sum(v for g in run["grpo"].values() for k, v in g["checks"].items() if isinstance(v, bool))
    total = sum(1 for g in run["grpo"].values() for v in g["checks"].values() if isinstance(v, bool))
    minutes = data["end_to_end"]["wall_clock_min"]
    return (f"{out}\n\nReward model: {rm['accuracy']:.3f} held-out pair accuracy [{rm['ci95'][0]:.3f}, "
            f"{rm['ci95'][1]:.3f}] on {rm['n']:,} pairs. GRPO curve checks: {checks} of {total}. "
            f"The recipe runs end to end in {minutes:.1f} min on 2 CPU cores. "
            f"Source: `benchmarks/results/{STAGE1_FILE}` (run {STAGE1_RUN}).")


GROUP_FILES = (("3", "group_eval_ms3.json"), ("2", "group_eval_ms2.json"))


def group() -> str:
    """The group-level table: every system's group score by valence, against MASCOT, at min speakers 3 and 2."""
    runs = [(ms, load(name), name) for ms, name in GROUP_FILES if (RESULTS / name).exists()]
    first = runs[0][1]
    ref = first.get("reference", "mascot")
    header = ["system"]
    for ms, d, _ in runs:
        vals = " / ".join(v for v in sorted(d["systems"][ref]["by_valence"]))
        header += [f"min speakers {ms}: group score ({vals})", f"{ref} minus it (Holm p)"]
    rows = []
    for system in first["systems"]:
        cells = [f"**{system}**" if system == ref else system]
        for _, d, _ in runs:
            s = d["systems"].get(system)
            if s is None:
                cells += ["not run", "–"]
                continue
            bv = " / ".join(f"{s['by_valence'][v]:.1f}" for v in sorted(s["by_valence"]))
            cells.append(f"{s['mean']:.1f} ({bv})")
            t = (d.get("tests") or {}).get(system)
            cells.append("–" if t is None else f"{signed(t['mean_diff'])} (p {fmt_p(t['wilcoxon_p_holm'])})")
        rows.append(cells)
    note = (f"{len(first['scenarios'])} held-out seeker scripts, one rollout each, replayed user, {first['user_turns']} "
            "user turns, offline group judge, Wilcoxon over scripts with Holm across systems. Sources: "
            + ", ".join(f"`benchmarks/results/{name}`" for _, _, name in runs) + ".")
    return f"{table(header, rows)}\n\n{note}"


SWEEP_FILES = (("Big Five", "group_sweep_big5.json"), ("MBTI", "group_sweep_mbti.json"))


def personality() -> str:
    """Each system's group score over the simulated user's personality profiles, and how often MASCOT is ahead."""
    sweeps = [(label, load(name), name) for label, name in SWEEP_FILES]
    systems = list(next(iter(sweeps[0][1]["profiles"].values())))
    ref = systems[0]
    header = ["system"] + [f"{label}: mean (lowest–highest of {len(d['profiles'])} profiles)" for label, d, _ in sweeps]
    header += [f"{ref} ahead ({label})" for label, _, _ in sweeps]
    rows = []
    for system in systems:
        cells = [f"**{system}**" if system == ref else system]
        for _, d, _ in sweeps:
            xs = [row[system]["mean"] for row in d["profiles"].values() if system in row]
            cells.append(f"{sum(xs) / len(xs):.1f} ({min(xs):.1f}–{max(xs):.1f})" if xs else "not run")
        for _, d, _ in sweeps:
            if system == ref or system not in next(iter(d["profiles"].values())):
                cells.append("–")
                continue
            ahead = sum(row[ref]["mean"] > row[system]["mean"] for row in d["profiles"].values())
            cells.append(f"{ahead} of {len(d['profiles'])}")
        rows.append(cells)
    s0 = sweeps[0][1]["settings"]
    note = (f"{len(s0['scenarios'])} held-out seeker scripts per profile, {s0['user_turns']} user turns, offline group "
            f"judge; the persona-by-profile heatmaps are `docs/figures/big5.png` and `docs/figures/mbti.png`. Sources: "
            + ", ".join(f"`benchmarks/results/{name}`" for _, _, name in sweeps) + ".\n"
            "![MBTI sweep: each persona's score by the simulated user's type](docs/figures/mbti.png)")
    return f"{table(header, rows)}\n\n{note}"


# (label, keys in report.json): the test split of crisis_messages.txt, then each held-out file's set
SAFETY_SETS = (
    ("test split of `crisis_messages.txt`", ()),
    ("large", ("heldout_large", "heldout_v3")),
    ("blind", ("heldout_blind", "heldout_v4")),
    ("distant", ("heldout_distant", "heldout_v5")),
    ("multilingual", ("heldout_multilingual", "heldout_ml")),
    ("multilingual_confirm", ("heldout_multilingual_confirm", "heldout_ml2")),
    ("fresh (development)", ("heldout_fresh",)),
    ("multilingual fresh", ("heldout_multilingual_fresh",)),
    ("everyday openings", ("heldout_everyday",)),
    ("latest (development)", ("heldout_latest",)),
    ("multilingual latest", ("heldout_multilingual_latest",)),
    ("everyday openings, latest", ("heldout_everyday_latest",)),
    ("multilingual newest", ("heldout_multilingual_newest",)),
    ("**next**", ("heldout_next",)),
    ("**multilingual next**", ("heldout_multilingual_next",)),
    ("**everyday openings, next**", ("heldout_everyday_next",)),
)


def safety() -> str:
    r = json.loads(SAFETY_REPORT.read_text())
    rows = []
    for label, keys in SAFETY_SETS:
        part = r if not keys else next(r[k] for k in keys if k in r)
        o = part["detector"]["overall"]
        has_crisis = o["recall_any"]["n"] > 0  # the everyday sets hold no crisis line
        rows.append([label, f"{part['test_size']:,}", rate_ci(o["recall_any"]) if has_crisis else "–",
                     f"{o['recall_crisis']['rate']:.3f}" if has_crisis else "–",
                     f"{o['fpr_crisis']['rate']:.3f}", rate_ci(o["fpr_any"])])
    rows.append(["target (newest sets)", "", "≥ 0.97 (multilingual ≥ 0.90)", "≥ 0.90", "≤ 0.05 (multilingual ≤ 0.08)",
                 "≤ 0.15"])
    out = table(["held-out set", "lines", "recall, crisis or concern", "recall, crisis tier", "FPR, crisis tier",
                 "FPR, crisis or concern"], rows)
    ordinary, ctx, oc = r["ordinary"], r["context"], r["output_check"]
    # latency from the dedicated benchmark when it is there (`safety eval` times it beside its other work)
    bench = json.loads(LATENCY.read_text()) if LATENCY.exists() else {}
    lat = bench.get("shipped_english", r["latency_ms"])
    enc = bench.get("encoders_one_message", r.get("encoder_ms", {}))
    return (f"{out}\n\nEveryday scenario openings (test split) in the crisis tier: {ordinary['fpr_crisis']['k']}/"
            f"{ordinary['fpr_crisis']['n']}, in either tier: {ordinary['fpr_any']['k']}/{ordinary['fpr_any']['n']}. Context cases: "
            f"{ctx['correct']}/{ctx['n']}. Bad persona replies replaced: {oc['bad_replaced']['k']}/"
            f"{oc['bad_replaced']['n']} (good ones: {oc['good_replaced']['k']}/{oc['good_replaced']['n']}). "
            f"Latency per English check: median {lat['median']:.1f} ms, p95 {lat['p95']:.1f} ms"
            + (f" (one message through MiniLM {enc['minilm']['median']:.1f} ms, USE {enc['use']['median']:.1f} ms). "
               if enc.keys() >= {"minilm", "use"} else ". ") +
            f"Sources: `{rel(SAFETY_REPORT)}`" + (f", `{rel(LATENCY)}`." if LATENCY.exists() else "."))


def sign_test_p(wins: int, n: int) -> float:
    """Exact two-sided sign test (binomial, p = 0.5), as scipy.stats.binomtest computes it."""
    k = max(wins, n - wins)
    tail = sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n
    return min(1.0, 2 * tail)


def annotation() -> str:
    rows = [["sign tests on the paper's " + ", ".join(f"{w}/{n}" for w, n in PAPER_SIGN_TESTS),
             "p = " + ", ".join(f"{sign_test_p(w, n):.1e}" for w, n in PAPER_SIGN_TESTS), "the paper's *** (p < 0.001)"]]
    path = RESULTS / ANNOTATION_FILE
    if path.exists():
        d = json.loads(path.read_text())
        for db, res in d["databases"].items():
            best = max((r for r in res["throughput"] if r["writers"] == 16), key=lambda r: r["judgments_per_s"])
            rows.append([f"{db}: votes with 16 concurrent writers ({best['mode']}; raw one-row inserts "
                         f"{res['raw_inserts']['rows_per_s']:,.0f} /s); `stats` on {res['stats']['judgments']:,} judgments",
                         f"{best['judgments_per_s']:,.0f} /s; {res['stats']['total_s']:.2f} s", "≥ 200 /s; < 2 s"])
        source = f"`benchmarks/results/{ANNOTATION_FILE}`"
    else:
        source = ("the sign tests are computed by this script (`scipy.stats.binomtest` gives the same); "
                  "`python benchmarks/annotation_throughput.py --databases sqlite postgresql --json benchmarks/results/"
                  f"{ANNOTATION_FILE}` records throughput against its targets (≥ 200 votes/s with 16 writers, "
                  "`stats` on 100,000 judgments < 2 s)")
    out = table(["check", "result", "target"], rows)
    return f"{out}\n\nSource: {source}."


ACCEPT_FILES = ("acceptability_validation.json", "acceptability_fresh.json", "careful_replies_amd_epyc_bf16.json")
ACCEPT_SYSTEMS = (("zero-shot", "Zero-Shot"), ("mascot", "shipped speakers"), ("mascot+stems", "shipped + stems"),
                  ("mascot+best3", "shipped + best of 3"), ("mascot+best3+stems", "shipped + stems + best of 3"))


def share_ci(x: dict) -> str:
    return f"{x['share']:.3f} [{x['ci95'][0]:.3f}, {x['ci95'][1]:.3f}]"


FRESH3_SYSTEMS = (("zero-shot", "Zero-Shot"), ("mascot", "shipped speakers, fast, no stems"),
                  ("mascot+best3+stems", "careful: labelled stems + best of 3 (default)"))


def fresh3_block() -> str:
    """The second fresh set (stems chosen by labels), when its comparison exists."""
    if not (RESULTS / "acceptability_fresh3.json").exists():
        return ""
    f = load("acceptability_fresh3.json")
    rows = [[label, str(s["n"]), *(share_ci(s[k]) for k in ("acceptable", "borderline", "not_acceptable")),
             f"{s['identifiability']['accuracy']:.2f}" if "identifiability" in s else ""]
            for key, label in FRESH3_SYSTEMS if (s := f["systems"].get(key))]
    rows.append(["target (default chat)", "", "≥ 0.5", "", "≤ 0.25", "not lower"])
    st = f["sign_tests"].get("mascot vs mascot+best3+stems")
    test = (f" Careful vs fast: better on {st['losses']}, worse on {st['wins']} of {st['pairs']} replies (sign test p "
            f"{fmt_p(st['p'])}).") if st else ""
    return ("Fresh openings never seen before (`mascot/data/fresh3`, 36), after the stems were chosen by labels "
            "(the first fresh set, with the earlier stems, is in docs/acceptability.md):\n\n"
            + table(["fresh3, labelled blind", "replies", "acceptable", "borderline", "not acceptable",
                     "identifiability"], rows) + "\n\n" + test.strip() + " ")


SELECTORS_FILE, SHIPPED_SCORER = "acceptability_fresh6_selectors.json", "scorer:shipped"


def _pct(policy: dict) -> str:
    return f"{100 * policy['acceptable']['share']:.1f}% acceptable, {100 * policy['not_acceptable']['share']:.1f}% not"


def acceptability() -> str:
    v, sel = load("acceptability_validation_fresh6.json"), load(SELECTORS_FILE)
    sc, jd = sel["scorer_auc"]["shipped"]["auc_not_unacceptable"], v["judge_overall"]["auc_not_unacceptable"]
    pol = sel["policies"]
    new, vs = pol[SHIPPED_SCORER], pol[SHIPPED_SCORER]["vs_shown"]
    head = (f"The shipped scorer (fitted on all 5,228 earlier labels) on every draw of the default careful turns on "
            f"fresh6 ({v['n']} draws labelled blind, none used to fit it) tells not-acceptable replies from the rest "
            f"with AUC {sc['auc']:.3f} [{sc['ci95'][0]:.3f}, {sc['ci95'][1]:.3f}] (target ≥ 0.85); the offline judge's "
            f"Overall {jd['auc']:.3f}. The draw it shows: {_pct(new)} (the previous scorer's: {_pct(pol['shown'])}; "
            f"better on {vs['better']}, worse on {vs['worse']} turns, p {fmt_p(vs['sign_p'])}); the best of the "
            f"three draws: {_pct(pol['best'])}. Sources: `benchmarks/results/{SELECTORS_FILE}`, "
            "`benchmarks/results/acceptability_validation_fresh6.json`.")
    out = ""
    f = load(ACCEPT_FILES[1])
    rows = []
    for key, label in ACCEPT_SYSTEMS:
        s = f["systems"].get(key)
        if s:
            rows.append([label, str(s["n"]), *(share_ci(s[k]) for k in ("acceptable", "borderline", "not_acceptable"))])
    rows.append(["target (default chat)", "", "≥ 0.5", "", "≤ 0.25"])
    out = head + "\n\n" + table(["fresh openings, labelled blind", "replies", "acceptable", "borderline",
                                   "not acceptable"], rows)
    tests = []
    for a, b, label in (("mascot", "mascot+best3+stems", "stems + best of 3"), ("mascot", "mascot+best3", "best of 3"),
                        ("mascot+best3", "mascot+best3+stems", "stems, given best of 3")):
        st = f["sign_tests"].get(f"{a} vs {b}")
        if st:
            tests.append(f"{label}: better on {st['losses']}, worse on {st['wins']} of {st['pairs']} replies "
                         f"(sign test p {fmt_p(st['p'])})")
    ident = ", ".join(f"{label} {f['systems'][k]['identifiability']['accuracy']:.2f}" for k, label in ACCEPT_SYSTEMS
                      if k in f["systems"] and "identifiability" in f["systems"][k])
    out += "\n\nPaired by opening and persona: " + "; ".join(tests) + f". Persona identifiability: {ident}."
    later = fresh3_block()
    if later:  # the current default's measurement replaces the first fresh set's table (that one is in the docs)
        out = head + "\n\n" + later
    t = load(ACCEPT_FILES[2])
    timing = "; ".join(f"best of {r['best_of']}{' + stems' if r['stems'] else ''}: first text {r['first_text_s']['median']} s,"
                       f" turn {r['turn_s']['median']} s" for r in t["rows"])
    sep = " " if out.endswith(" ") else "\n\n"
    return (f"{out.rstrip()}{sep}Three-speaker turn on llama.cpp, trained director, medians ({t['machine']['cpu']}, {t['machine']['cores']} cores): "
            f"{timing}. Sources: " + ", ".join(f"`benchmarks/results/{n}`" for n in (*ACCEPT_FILES, "acceptability_fresh3.json")
                                               if (RESULTS / n).exists()) + ".")


AREAS: dict[str, Callable[[], str]] = {
    "chat-speed": chat_speed,
    "stage1": stage1,
    "group": group,
    "personality": personality,
    "safety": safety,
    "annotation": annotation,
    "acceptability": acceptability,
}


def block(area: str) -> re.Pattern[str]:
    """The README block of one area: its start marker, the table and its notes, its end marker."""
    return re.compile(rf"<!-- results:{area} -->\n(.*?)<!-- /results:{area} -->", re.S)


def framed(area: str, body: str) -> str:
    return f"<!-- results:{area} -->\n{body}\n<!-- /results:{area} -->"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--area", choices=sorted(AREAS), help="print one table only")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="replace the tables in README.md")
    group.add_argument("--check", action="store_true", help="exit 1 if README.md's tables differ from the JSON files")
    args = parser.parse_args(argv)
    areas = [args.area] if args.area else list(AREAS)
    rendered = {a: AREAS[a]() for a in areas}
    if not (args.write or args.check):
        for a in areas:
            print(framed(a, rendered[a]) + "\n")
        return 0
    text = README.read_text()
    stale = []
    for a in areas:
        pattern = block(a)
        m = pattern.search(text)
        if m is None:
            print(f"README.md has no <!-- results:{a} --> block", file=sys.stderr)
            return 1
        if m.group(0) != framed(a, rendered[a]):
            stale.append(a)
            text = pattern.sub(lambda _m, a=a: framed(a, rendered[a]), text)
    if args.check:
        if stale:
            print(f"README.md tables out of date: {', '.join(stale)} (run python3 scripts/render_results.py --write)",
                  file=sys.stderr)
            return 1
        print("README.md tables match the JSON files")
        return 0
    README.write_text(text)
    print(f"updated {', '.join(stale) or 'nothing'} in README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
