"""How well the judge's mood reading finds distress without a label (so a persona does not celebrate bad news).

Every labelled opening the project bundles (the Empathetic-Dialogues-format train and test splits and the two
fresh sets) is read *without* its emotion label, and the reading is compared with the label's valence
(negative = distress, positive = good news; the five neutral labels are left out). Reported with 95% Wilson
intervals for the judge's word list (`DISTRESS_CUES`, what `mascot.judges.mood` falls back on when a message has
no label) and, as the tried alternative, an embedding reading: the message's mean top-3 similarity to 16 short
distress lines minus that to 16 good-news lines, above 0.02. Neither is good enough to stand in for the label,
which is why the judge reads the label first. Also printed: hand-written phrasings the word list misses.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/mood_signal.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from mascot.data import load_scenarios
from mascot.group.dialogue import USER
from mascot.judges.embedding import shared_embedder
from mascot.judges.mood import has_distress_words as by_words
from mascot.stats import wilson_interval

SETS = ("bundled:ed", "empathetic_dialogues:mascot/data/fresh", "empathetic_dialogues:mascot/data/fresh2")
DISTRESS_LINES = (
    "I feel completely out of my depth and I'm scared I can't cope.",
    "I'm so lonely, nobody really talks to me anymore.",
    "Someone I loved died and I can't stop crying.",
    "I failed again and I feel like such an idiot.",
    "I'm really anxious about tomorrow, my heart is racing.",
    "I got rejected and it hurts more than I want to admit.",
    "I'm exhausted and overwhelmed, everything is falling apart.",
    "I feel ashamed of what I did and I can't stop thinking about it.",
    "My partner left me and the house feels empty.",
    "I'm furious, they treated me so unfairly.",
    "I'm worried something is seriously wrong with my health.",
    "I lost my job and I don't know how I'll pay the rent.",
    "I feel like I'm not good enough and everyone can tell.",
    "I'm jealous of my friend and I hate feeling this way.",
    "I was humiliated in front of everyone today.",
    "I can't sleep because I keep dreading what's coming.",
)
GOOD_NEWS_LINES = (
    "I got the job and I'm so excited to start!",
    "We just found out we're having a baby, I'm over the moon.",
    "I finally passed my exam and I feel so proud.",
    "My best friend surprised me with a lovely party.",
    "I'm really grateful for how kind my neighbours have been.",
    "I ran my first marathon today and I feel amazing.",
    "I'm looking forward to our holiday next week.",
    "My daughter took her first steps this morning!",
    "I got promoted and my boss praised my work in front of everyone.",
    "I feel calm and content after a quiet weekend at home.",
    "I'm confident the presentation will go well, I've prepared a lot.",
    "We adopted a puppy and the whole family is thrilled.",
    "I was impressed by how well my team handled the launch.",
    "I'm hopeful things are finally turning around for me.",
    "I reconnected with an old friend and it made my week.",
    "My garden is blooming and it makes me happy every morning.",
)
MARGIN, TOP_K = 0.02, 3
PHRASINGS = [  # distress the word list does not hold, and good news that must not read as distress
    ("I started a new job this week and I feel out of my depth.", True),
    ("Nobody would even notice if I didn't show up tomorrow.", True),
    ("My presentation went badly and my manager hasn't said a word since.", True),
    ("I keep replaying the argument with my sister and my stomach is in knots.", True),
    ("We closed on our first house today!", False),
    ("My son got into the university he wanted.", False),
]


def rate(k: int, n: int) -> dict[str, float]:
    lo, hi = wilson_interval(k, n) if n else (float("nan"), float("nan"))
    return {"k": k, "n": n, "rate": round(k / n, 3) if n else float("nan"), "ci": [round(lo, 3), round(hi, 3)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    emb = shared_embedder()
    bad, good = emb.encode(list(DISTRESS_LINES)), emb.encode(list(GOOD_NEWS_LINES))

    def margin(text: str) -> float:
        v = emb.encode([text])[0]
        return float(np.sort(bad @ v)[-TOP_K:].mean() - np.sort(good @ v)[-TOP_K:].mean())

    rows = []
    for spec in SETS:
        for s in load_scenarios(spec):
            if s.setting != "emotional-support" or s.valence not in ("negative", "positive"):
                continue
            text = next((t for who, t in reversed(s.turns) if who == USER), s.situation)
            rows.append((s.valence == "negative", text))
    out: dict[str, object] = {"openings": len(rows), "distress": sum(d for d, _ in rows), "margin": MARGIN}
    for name, read in (("words", by_words), ("embedding", lambda t: margin(t) > MARGIN),
                       ("words or embedding", lambda t: by_words(t) or margin(t) > MARGIN)):
        said = [(d, read(t)) for d, t in rows]
        tp = sum(d and r for d, r in said)
        fp = sum((not d) and r for d, r in said)
        pos = sum(d for d, _ in said)
        out[name] = {"recall": rate(tp, pos), "false_positive_rate": rate(fp, len(said) - pos),
                     "accuracy": rate(sum(d == r for d, r in said), len(said))}
    out["phrasings"] = [{"text": t, "distress": d, "words": by_words(t), "margin": round(margin(t), 3)}
                        for t, d in PHRASINGS]
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
