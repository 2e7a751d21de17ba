"""How often the output check replaces an ordinary persona reply in the live chat.

Each of N ordinary openings (the bundled test scenarios of the pack's setting: celebrations, chores, small
worries; none of them a crisis) gets one group turn through `GroupChat` in `trained` mode on the chat's backend,
with the shipped speakers. A replaced reply shows the user the safety text instead of what the persona said.
Reported twice: with the chat's context gate (the reply classifier may only replace a sentence using a word of
self-harm, death or means while the user's message is *none*) and without it (every classifier verdict counts),
on the same replies: the guard re-checks each streamed reply both ways.
The labelled bad/good replies (`mascot/data/safety/persona_replies.txt`, test split) are also scored with the
gate on, which shows what it would cost if a bad reply came in an ordinary conversation.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/reply_false_positives.py [--limit 48] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mascot.backends import load_backend


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=48, help="ordinary openings (default: %(default)s)")
    ap.add_argument("--run", default="tiny-cpu")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    backend = load_backend("auto", model="embedded")  # before torch (see import_llama_cpp)
    from mascot.data import load_scenarios
    from mascot.group.chat import GroupChat
    from mascot.group.dialogue import Dialogue
    from mascot.group.engine import Engine, EngineConfig
    from mascot.group.personas import load_pack
    from mascot.safety.detector import CrisisDetector
    from mascot.safety.training.data import load_replies
    from mascot.stats import wilson_interval

    def rate(k: int, n: int) -> dict[str, float]:
        low, high = wilson_interval(k, n)
        return {"k": k, "n": n, "rate": round(k / n, 4) if n else 0.0, "low": round(low, 4), "high": round(high, 4)}

    pack = load_pack("emotional-support")
    Engine(EngineConfig(), backend, run_dir=Path("checkpoints") / args.run).attach_adapters(pack)
    detector = CrisisDetector()  # the chat's layers; no event log, so nothing is recorded
    patterns_only = CrisisDetector(use_classifier=False)  # the replies as the personas wrote them
    openings = [s for s in load_scenarios("bundled", split="test") if s.setting == pack.setting][: args.limit]
    replies: list[str] = []
    tiers: list[str] = []
    for i, s in enumerate(openings):
        dialogue = s.to_dialogue()
        text = dialogue.turns[-1].text if dialogue.turns else s.situation
        tiers.append(detector.check(text, record=False).tier)
        group = GroupChat(backend, pack.active, mode="trained", safety=patterns_only)
        replies += [t.text for t in group.run(Dialogue(), text, seed=i) if not t.meta.get("crisis")]

    def replaced(text: str, risky: bool) -> bool:
        guard = detector.guard(risky=risky)
        list(guard.stream([text + " "]))
        return guard.replaced

    gated = [replaced(r, risky=False) for r in replies]
    ungated = [replaced(r, risky=True) for r in replies]
    examples = [e for e in load_replies() if e.split == "test"]
    bad = [e.text for e in examples if e.positive]
    good = [e.text for e in examples if not e.positive]
    out = {
        "openings": len(openings), "input_tiers": {t: tiers.count(t) for t in sorted(set(tiers))}, "replies": len(replies),
        "ordinary_replaced_with_gate": rate(sum(gated), len(replies)),
        "ordinary_replaced_without_gate": rate(sum(ungated), len(replies)),
        "labelled_bad_replaced_risky_context": rate(sum(replaced(t, True) for t in bad), len(bad)),
        "labelled_bad_replaced_ordinary_context": rate(sum(replaced(t, False) for t in bad), len(bad)),
        "labelled_good_replaced_ordinary_context": rate(sum(replaced(t, False) for t in good), len(good)),
        "replaced_without_gate": [r for r, b in zip(replies, ungated) if b][:10],
        "replaced_with_gate": [r for r, b in zip(replies, gated) if b][:10],
    }
    for key, value in out.items():
        print(f"{key}: {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
