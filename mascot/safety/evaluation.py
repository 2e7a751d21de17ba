"""`safety eval`: the detector measured on every held-out set, with the pattern layer alone and the full
detector: recall and false-positive rate with 95% Wilson intervals, per category, the confusion matrix, the
context cases, the output check and latency. `REPORT` holds the shipped figures that docs/safety.md quotes and
the tests re-check.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from pathlib import Path

import numpy as np

from mascot.errors import InputError
from mascot.jobs.events import tracked
from mascot.safety.training.data import (
    TrainingSets,
    load_context_cases,
    load_meeting_openings,
    load_messages,
    load_ordinary,
    load_replies,
    load_retired_fresh,
    load_retired_heldout,
)
from mascot.safety.training.heldout import HELDOUT_FILES, load_categories, load_heldout
from mascot.stats import wilson_interval

REPORT = Path(__file__).resolve().parent.parent / "data" / "safety" / "report.json"
BENIGN_HISTORY = ("I've had a long week at work.", "My sister visited on Sunday.")
# report key -> (title, loader) of each test-only set besides the hash split of crisis_messages.txt
TITLES = {
    "heldout_large": "Large held-out set",
    "heldout_blind": "Held-out set by blind writers",
    "heldout_distant": "Held-out set distant from every other file",
    "heldout_multilingual": "Multilingual held-out set",
    "heldout_multilingual_confirm": "Multilingual confirmation set",
    "heldout_fresh": "Fresh English held-out set",
    "heldout_multilingual_fresh": "Fresh multilingual held-out set",
    "heldout_everyday": "Everyday openings by a blind writer, none a crisis",
    "heldout_latest": "Latest English held-out set",
    "heldout_multilingual_latest": "Latest multilingual held-out set",
    "heldout_everyday_latest": "Everyday openings by a second blind writer",
    "heldout_multilingual_newest": "Newest multilingual held-out set",
    "heldout_next": "Next English held-out set",
    "heldout_multilingual_next": "Next multilingual held-out set",
    "heldout_everyday_next": "Everyday openings by a third blind writer",
}
# report key -> (title, loader) of each test-only set besides the hash split of crisis_messages.txt
HELDOUT_SETS = {key: (f"{TITLES[key]} ({name}{'; categories are languages' if multilingual else ''})",
                      functools.partial(load_heldout, key)) for key, (name, multilingual) in HELDOUT_FILES.items()}
HELDOUT_SETS["categories"] = ("Category checks (crisis_categories.txt; development lines, not held out)", load_categories)
# the readings each set is measured with: the patterns alone, the detector without the USE layer (MiniLM alone,
# with every pattern and rule), the USE layer alone on every message, and the shipped combination
VARIANTS = ("patterns", "minilm", "use", "detector")
# held out only for a model that did not train on them (the shipped one does): key -> (title, loader), and the
# `TrainingSets` field that says a model trained on the set
RETIRED_SETS = {"heldout_retired": ("Retired held-out set (crisis_heldout_retired.txt)", lambda: load_retired_heldout("test")),
                "heldout_retired_fresh": ("Retired fresh set (crisis_heldout_retired_fresh.txt)", lambda: load_retired_fresh("test"))}
RETIRED_BY = {"heldout_retired": "retired_heldout", "heldout_retired_fresh": "retired_fresh"}


def _rate(k: int, n: int) -> dict:
    lo, hi = wilson_interval(k, n)
    return {"k": k, "n": n, "rate": (k / n) if n else float("nan"), "low": lo, "high": hi}


def _fmt(r: dict) -> str:
    return f"{r['rate']:.3f} [{r['low']:.3f}, {r['high']:.3f}] ({r['k']}/{r['n']})" if r["n"] else "n/a"


def _measure(examples, tiers: list[str]) -> dict:  # type: ignore[no-untyped-def]
    """Recall (crisis messages flagged) and FPR (hard negatives flagged), strict = crisis tier,
    any = crisis or concern; overall and per category; plus the confusion matrix."""
    out: dict = {"overall": {}, "categories": {}, "confusion": {}}
    pos = [(e, t) for e, t in zip(examples, tiers) if e.positive]
    neg = [(e, t) for e, t in zip(examples, tiers) if not e.positive]
    for level, flagged in (("crisis", {"crisis"}), ("any", {"crisis", "concern"})):
        out["overall"][f"recall_{level}"] = _rate(sum(t in flagged for _, t in pos), len(pos))
        out["overall"][f"fpr_{level}"] = _rate(sum(t in flagged for _, t in neg), len(neg))
    for cat in sorted({e.category for e in examples}):
        items = [(e, t) for e, t in zip(examples, tiers) if e.category == cat]
        metric = "recall" if items[0][0].positive else "fpr"
        out["categories"][cat] = {"metric": metric,
                                  "crisis": _rate(sum(t == "crisis" for _, t in items), len(items)),
                                  "any": _rate(sum(t in ("crisis", "concern") for _, t in items), len(items))}
    c = Counter((e.label, t) for e, t in zip(examples, tiers))
    out["confusion"] = {label: {t: c[(label, t)] for t in ("crisis", "concern", "none")} for label in ("crisis", "negative")}
    return out


def evaluate(runs: int = 200, model_root: Path | None = None, only: list[str] | None = None) -> dict:
    """Every figure `safety eval` prints, as a dict (for the classifiers under `model_root`, or the shipped ones);
    `only` names the held-out sets to read (default: every one the model did not train on)."""
    if only is not None:
        known = list(HELDOUT_SETS | RETIRED_SETS)
        unknown = [k for k in only if k not in known]
        if unknown:
            raise InputError(f"Unknown held-out set(s) {', '.join(unknown)}; the sets are: {', '.join(known)}.")
    import torch

    from mascot.safety.classifier import load_classifier
    from mascot.safety.detector import CrisisDetector

    torch.set_num_threads(1)
    test = [e for e in load_messages() if e.split == "test"]
    patterns = CrisisDetector(use_classifier=False)
    if model_root:  # the classifiers saved by `safety train --out`: the message classifier and, when there, the USE head
        from mascot.safety.multilingual import NAME, load_multilingual

        use = (model_root / NAME / "classifier.json").exists()
        full = CrisisDetector(classifier=load_classifier("messages", model_root),
                              multilingual=load_multilingual(model_root) if use else None, use_multilingual=use)
    else:
        full = CrisisDetector()
    variants = {"patterns": patterns, "detector": full,
                "minilm": CrisisDetector(classifier=full.classifier, use_multilingual=False)}
    if full.multilingual is not None:
        variants["use"] = CrisisDetector(classifier=full.classifier, multilingual=full.multilingual, use_only=True)
    report: dict = {"test_size": len(test), "thresholds": {**dict(zip(("crisis", "concern"), full.thresholds)), "context": full.context_floor}}
    report["patterns"] = _measure(test, [patterns.check(e.text, record=False).tier for e in test])
    report["detector"] = _measure(test, [full.check(e.text, record=False).tier for e in test])
    report["detector_after_benign_turns"] = _measure(test, [full.check(e.text, BENIGN_HISTORY, record=False).tier for e in test])
    trained = TrainingSets.of_model(full.classifier.meta)
    use_sets = full.multilingual.meta.get("english_extra_sets", []) if full.multilingual is not None else []
    retired = {k: v for k, v in RETIRED_SETS.items() if not getattr(trained, RETIRED_BY[k]) and RETIRED_BY[k] not in use_sets}
    sets = {key: load() for key, (_, load) in (HELDOUT_SETS | retired).items() if only is None or key in only}
    for key, rows in tracked(sets.items(), step="held-out sets", total=len(sets), bar=False):
        report[key] = {"test_size": len(rows)} | {
            name: _measure(rows, [d.check(e.text, record=False).tier for e in rows]) for name, d in variants.items()}
    ordinary = [e for e in load_ordinary() if e.split == "test"]
    flagged = [full.check(e.text, record=False).tier for e in ordinary]
    report["ordinary"] = {"fpr_crisis": _rate(flagged.count("crisis"), len(ordinary)),
                          "fpr_any": _rate(len(ordinary) - flagged.count("none"), len(ordinary))}
    # meeting openings the classifier never saw: all of them for a model trained without them, else the test split
    unseen = "meeting" in full.classifier.meta.get("untrained_categories", [])
    meeting = [e for e in load_meeting_openings() if unseen or e.split == "test"]
    flagged = [full.check(e.text, record=False).tier for e in meeting]
    report["meeting"] = {"fpr_crisis": _rate(flagged.count("crisis"), len(meeting)),
                         "fpr_any": _rate(len(meeting) - flagged.count("none"), len(meeting))}
    cases = load_context_cases()
    got = [full.check(c.turns[-1], c.turns[:-1], record=False).tier for c in cases]
    report["context"] = {"n": len(cases), "correct": sum(g == c.expected for g, c in zip(got, cases)),
                         "cases": [{"expected": c.expected, "got": g} for c, g in zip(cases, got)]}
    replies = [e for e in load_replies() if e.split == "test"]
    blocked = [full.check_reply(e.text, record=False).blocked for e in replies]
    report["output_check"] = {"bad_replaced": _rate(sum(b for b, e in zip(blocked, replies) if e.positive), sum(e.positive for e in replies)),
                              "good_replaced": _rate(sum(b for b, e in zip(blocked, replies) if not e.positive), sum(not e.positive for e in replies))}
    report["latency_ms"] = measure_latency(full, [e.text for e in test], runs)
    report["encoder_ms"] = encoder_costs(full, [e.text for e in test][:runs])
    return report


def encoder_costs(detector, texts: list[str]) -> dict:  # type: ignore[no-untyped-def]
    """Milliseconds to encode one message with each encoder alone (median and p95, each text once)."""
    out = {}
    encoders = {"minilm": detector.classifier.encoder.embed}
    if detector.multilingual is not None:
        encoders["use"] = detector.multilingual.encoder.embed
    for name, embed in encoders.items():
        embed(["warm-up"])
        timings = []
        for text in texts:
            start = time.perf_counter()
            embed([text])
            timings.append((time.perf_counter() - start) * 1000)
        out[name] = {"median": float(np.median(timings)), "p95": float(np.percentile(timings, 95)), "runs": len(timings)}
    return out


def measure_latency(detector, texts: list[str], runs: int) -> dict:  # type: ignore[no-untyped-def]
    """Milliseconds per `check` of one message with two earlier user turns (model already loaded)."""
    import torch

    detector.check("hello", BENIGN_HISTORY, record=False)  # load the model outside the timing
    detector.classifier.clear_cache()  # every message and window is encoded inside the timing
    if detector.multilingual is not None:
        detector.multilingual.clear_cache()
    detector.check("hello", BENIGN_HISTORY, record=False)  # ...except the earlier turns, scored on the previous turn
    timings, cpu = [], []
    for text in texts[:runs]:  # each text once: no cached score flatters the figure
        start, start_cpu = time.perf_counter(), time.process_time()
        detector.check(text, BENIGN_HISTORY, record=False)
        timings.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    return {"runs": len(timings), "median": float(np.median(timings)), "p95": float(np.percentile(timings, 95)),
            "max": float(np.max(timings)), "cpu_median": float(np.median(cpu)), "torch_threads": torch.get_num_threads()}


def print_heldout(title: str, r: dict) -> None:
    """Overall and per-category figures and the confusion matrices of one held-out set."""
    print(f"== {title}: {r['test_size']} messages ==")
    names = [v for v in VARIANTS if v in r]
    titles = {"patterns": "patterns alone", "minilm": "MiniLM alone", "use": "USE layer alone", "detector": "full detector"}
    print(f"{'':34}" + "".join(f" {titles[v]:>34}" for v in names))
    for key, label in (("recall_crisis", "recall (tier crisis)"), ("recall_any", "recall (crisis or concern)"),
                       ("fpr_crisis", "false-positive rate (tier crisis)"), ("fpr_any", "FPR (crisis or concern)")):
        print(f"{label:34}" + "".join(f" {_fmt(r[v]['overall'][key]):>34}" for v in names))
    print("\nPer category (95% Wilson intervals; recall for crisis categories, FPR for hard negatives):")
    print(f"{'category':22} {'metric':6} {'patterns: crisis':>30} {'detector: crisis':>30} {'detector: crisis|concern':>30}")
    for cat, m in r["detector"]["categories"].items():
        p = r["patterns"]["categories"][cat]
        print(f"{cat:22} {m['metric']:6} {_fmt(p['crisis']):>30} {_fmt(m['crisis']):>30} {_fmt(m['any']):>30}")
    for name in ("patterns", "detector"):
        print(f"\nConfusion matrix ({name}; rows = label, columns = tier):")
        print(f"{'':10} {'crisis':>8} {'concern':>8} {'none':>8}")
        for label, row in r[name]["confusion"].items():
            print(f"{label:10} {row['crisis']:>8} {row['concern']:>8} {row['none']:>8}")
    print()


def print_report(r: dict) -> None:
    t = r["thresholds"]
    print(f"Thresholds crisis={t['crisis']:.4f} concern={t['concern']:.4f} context floor={t.get('context', t['concern']):.4f}\n")
    print_heldout("Held-out split of crisis_messages.txt", r)
    for key, (title, _) in (HELDOUT_SETS | RETIRED_SETS).items():
        if key in r:
            print_heldout(title, r[key])
    a = r["detector_after_benign_turns"]["overall"]
    print(f"\nThe same messages after two harmless earlier turns: recall (crisis) {_fmt(a['recall_crisis'])}, "
          f"recall (crisis or concern) {_fmt(a['recall_any'])}, FPR (crisis) {_fmt(a['fpr_crisis'])}, "
          f"FPR (crisis or concern) {_fmt(a['fpr_any'])}")
    o = r["ordinary"]
    print(f"Everyday messages (bundled scenario openings, test split): FPR (crisis) {_fmt(o['fpr_crisis'])}, "
          f"FPR (crisis or concern) {_fmt(o['fpr_any'])}")
    m = r["meeting"]
    print(f"Meeting questions (bundled meeting openings the classifier never saw): FPR (crisis) {_fmt(m['fpr_crisis'])}, "
          f"FPR (crisis or concern) {_fmt(m['fpr_any'])}")
    c = r["context"]
    print(f"\nContext cases (last three user turns): {c['correct']}/{c['n']} tiers as expected")
    o = r["output_check"]
    print(f"Output check (held-out replies): bad replaced {_fmt(o['bad_replaced'])}; good replaced {_fmt(o['good_replaced'])}")
    lat = r["latency_ms"]
    print(f"Latency per check with two earlier turns (CPU, {lat['torch_threads']} torch thread(s), {lat['runs']} messages): "
          f"median {lat['median']:.1f} ms, p95 {lat['p95']:.1f} ms, max {lat['max']:.1f} ms wall; median {lat['cpu_median']:.1f} ms CPU")
    for name, e in r.get("encoder_ms", {}).items():
        print(f"Encoder {name} alone, one message: median {e['median']:.1f} ms, p95 {e['p95']:.1f} ms ({e['runs']} messages)")
