"""`python -m mascot compare-directors` on the fake backend: several rollouts per scenario, averaged per
scenario for the paired tests, and --reuse refusing a file made with another number of rollouts."""

from __future__ import annotations

import json
import math
from pathlib import Path

from mascot.__main__ import main as mascot_main


def test_repeats_average_rollouts_per_scenario_and_reuse_checks_them(tmp_path: Path, capsys) -> None:
    out = tmp_path / "cmp.json"
    rc = mascot_main(["compare-directors", "--systems", "random,round-robin", "--limit", "3", "--repeats", "2",
                      "--backend", "fake", "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0 and "x 2 rollouts each" in printed and "acceptable" in printed
    res = json.loads(out.read_text())
    assert res["repeats"] == 2
    for system in ("random", "round-robin"):
        s = res["systems"][system]
        assert len(s["per_scenario"]) == 3 and len(s["per_rollout"]) == 6 and len(s["dialogues"]) == 6
        for i in range(3):
            got = [x for x in (s["per_rollout"][i], s["per_rollout"][i + 3]) if not math.isnan(x)]
            assert abs(s["per_scenario"][i] - sum(got) / len(got)) < 1e-9
        # every persona turn of every rollout is scored for acceptability in its context
        acc = s["acceptability"]
        turns = sum(1 for d in s["dialogues"] for t in d["turns"] if t["speaker"] != "user" and t["text"].strip())
        assert acc["replies"] == turns > 0
        assert 0 <= acc["acceptable"] <= 100 and 0 <= acc["unacceptable"] <= 100
    # the second rollout of a scenario is a different sample (its own seed)
    assert res["systems"]["random"]["dialogues"][0] != res["systems"]["random"]["dialogues"][3]
    rc = mascot_main(["compare-directors", "--systems", "random", "--limit", "3", "--backend", "fake", "--reuse", str(out),
                      "--scorer", "none"])
    assert rc == 2 and "'repeats'" in capsys.readouterr().err
