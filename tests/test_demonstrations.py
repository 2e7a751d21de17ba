"""The committed written demonstrations: every row trains every persona, starts with one of its stems, and shares no
opening with a held-out or fresh test set."""

from __future__ import annotations

import json
from pathlib import Path

from mascot.acceptability.distill import demonstration_targets
from mascot.data.formats import read_ed_rows
from mascot.group.personas import load_pack

DEMOS = Path("mascot/data/demonstrations/written.jsonl")


def test_every_demonstration_reply_starts_with_a_stem_and_fits_the_speaker_budget():
    pack = load_pack("emotional-support")
    targets = demonstration_targets([DEMOS], pack)
    rows = [json.loads(x) for x in DEMOS.read_text(encoding="utf-8").splitlines()]
    assert len(targets) == 3 * len(rows) and len({r["id"] for r in rows}) == len(rows)
    for t in targets:
        persona = pack.get(t["persona"])
        assert t["reply"].startswith(tuple(persona.stems)), t["id"]
        assert len(t["reply"].split()) <= 30 and "the user" not in t["reply"].lower()
    assert all(t["reply"].endswith("?") for t in targets if t["persona"] == "Catalyst")


def test_no_demonstration_opening_is_a_test_opening():
    def norm(text: str) -> str:
        return " ".join(text.replace("_comma_", ",").lower().split())

    openings = {norm(json.loads(x)["opening"]) for x in DEMOS.read_text(encoding="utf-8").splitlines()}
    sets = [p for p in Path("mascot/data").glob("*/test.csv") if p.parent.name != "bundled"]
    assert len(sets) >= 8
    for path in sets:
        tests = {norm(r["utterance"]) for r in read_ed_rows(path)}
        assert not openings & tests, path
