"""Group-level evaluation (`eval --level group`, alias `compare-directors`) on the fake backend: the systems
registry, several rollouts per scenario averaged per scenario, --reuse refusing a file made with other settings,
paired tests with known outcomes, and the Markdown and CSV tables."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from mascot.__main__ import main as mascot_main
from mascot.errors import ConfigError
from mascot.evaluation.group_eval import GROUP_SYSTEMS, against_reference, by_valence, group_system, paired_tests


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


def test_registry_names_and_aliases() -> None:
    assert group_system("trained") is GROUP_SYSTEMS["mascot"] and group_system("random") is GROUP_SYSTEMS["mascot-c"]
    assert not group_system("mascot-p").use_adapters and group_system("mascot-p").mode == "trained"
    assert group_system("zero-shot").one_voice and group_system("few-shot").style == "few-shot"
    with pytest.raises(ConfigError, match="mascot-p"):
        group_system("mascot-x")


def test_paired_tests_with_known_outcomes() -> None:
    a = [60.0, 62.0, 70.0, 55.0, 64.0, 61.0, 66.0, 59.0]
    better = paired_tests(a, [x - 5 for x in a])  # the reference wins every scenario by 5 points
    assert (better["wins"], better["losses"], better["ties"]) == (8, 0, 0) and better["mean_diff"] == 5.0
    assert better["sign_p"] == pytest.approx(2 / 2**8)  # exact two-sided sign test, 8 of 8
    assert better["wilcoxon_p"] < 0.01 and better["wilcoxon_p_greater"] < better["wilcoxon_p"]
    same = paired_tests(a, list(a))
    assert same["sign_p"] == 1.0 and same["wilcoxon_p"] == 1.0 and same["ties"] == 8
    # a scenario without a valid score on one side is left out of the pairs
    assert paired_tests([1.0, math.nan, 3.0], [0.0, 2.0, 1.0])["wins"] == 2


def test_holm_across_systems_and_valence_means() -> None:
    ref = [60.0 + i for i in range(10)]
    results = {"systems": {"mascot": {"per_scenario": ref},
                           "far": {"per_scenario": [x - 10 for x in ref]},
                           "near": {"per_scenario": [x - (1 if i % 3 else -1) for i, x in enumerate(ref)]}}}
    tests = against_reference(results, "mascot")
    assert set(tests) == {"far", "near"}
    for t in tests.values():
        assert t["wilcoxon_p_holm"] >= t["wilcoxon_p"]
    assert tests["far"]["wilcoxon_p_holm"] == pytest.approx(min(1.0, 2 * tests["far"]["wilcoxon_p"]))  # smallest p x 2
    assert by_valence([50.0, 70.0, math.nan, 60.0], ["negative", "positive", "negative", ""]) == \
        {"negative": 50.0, "positive": 70.0, "unknown": 60.0}


def test_eval_level_group_runs_ablations_and_one_voice_baseline(tmp_path: Path, capsys) -> None:
    out, md, table = tmp_path / "g.json", tmp_path / "g.md", tmp_path / "g.csv"
    pairs = tmp_path / "pairs.jsonl"
    rc = mascot_main(["eval", "--level", "group", "--systems", "mascot-p,mascot-c,zero-shot,round-robin", "--limit", "4",
                      "--backend", "fake", "--run", "tiny-cpu", "--scorer", "none", "--json", str(out),
                      "--markdown", str(md), "--csv", str(table), "--export-pairs", "mascot-c,zero-shot", str(pairs)])
    printed = capsys.readouterr().out
    assert rc == 0 and "Group-level evaluation" in printed
    res = json.loads(out.read_text())
    assert list(res["systems"]) == ["mascot-p", "mascot-c", "zero-shot", "round-robin"] and "tests" not in res
    one_voice = {t["speaker"] for d in res["systems"]["zero-shot"]["dialogues"] for t in d["turns"] if t["speaker"] != "user"}
    assert len(one_voice) == 1  # a single assistant answers every message
    assert len(res["valences"]) == 4 and res["systems"]["mascot-c"]["by_valence"]
    assert md.read_text().count("\n| ") == 1 + 4 and "MASCOT-C" in md.read_text()
    assert table.read_text().splitlines()[0].startswith("system,label,mean,std") and len(table.read_text().splitlines()) == 5
    # the exported pairs go into an annotation study, take one vote, and give the study's stats
    from annotation.cli import main as annotation_main

    db, votes = f"sqlite:///{tmp_path / 'a.db'}", tmp_path / "votes.csv"
    first = json.loads(pairs.read_text().splitlines()[0])
    assert len(pairs.read_text().splitlines()) == 4 and first["a"]["dialogue"][0]["speaker"] == "User"
    assert annotation_main(["--db", db, "create-study", "--study", "grp"]) == 0
    assert annotation_main(["--db", db, "import-pairs", str(pairs), "--study", "grp"]) == 0
    votes.write_text(f"item_id,annotator,choice\n{first['id']},ann1,mascot-c\n")
    assert annotation_main(["--db", db, "import-judgments", str(votes), "--study", "grp"]) == 0
    report = io.StringIO()
    assert annotation_main(["--db", db, "stats", "--study", "grp", "--json"], out=report) == 0
    stats = json.loads(report.getvalue())
    assert [(c["wins"], c["losses"]) for c in stats["comparisons"]] in ([(1, 0)], [(0, 1)])


def test_unknown_group_system_names_the_valid_ones(capsys) -> None:
    assert mascot_main(["eval", "--level", "group", "--systems", "mascot,bogus", "--backend", "fake"]) == 2
    err = capsys.readouterr().err
    assert "bogus" in err and "mascot-p" in err



def test_mbti_sweep_writes_a_table_per_profile_and_the_heatmap(tmp_path: Path, capsys) -> None:
    from mascot.evaluation.personality_sweep import sweep_profiles

    assert len(sweep_profiles("mbti")) == 16 and len(sweep_profiles("big5")) == 10
    out, png = tmp_path / "sweep.json", tmp_path / "mbti.png"
    rc = mascot_main(["eval", "--level", "group", "--sweep", "mbti", "--systems", "round-robin,mascot-c", "--limit", "1",
                      "--user-turns", "2", "--backend", "fake", "--scorer", "none", "--json", str(out), "--heatmap", str(png)])
    printed = capsys.readouterr().out
    assert rc == 0 and "Personality sweep (mbti)" in printed and "mbti-INFP" in printed
    res = json.loads(out.read_text())
    assert list(res["profiles"]) == sweep_profiles("mbti") and res["settings"]["user"] == "llm"
    row = res["profiles"]["mbti-INFP"]["round-robin"]
    assert set(row["by_persona"]) == set(res["personas"]) and all(0 <= v <= 100 for v in row["by_persona"].values())
    assert png.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ConfigError, match="big5, mbti"):
        sweep_profiles("ocean")
