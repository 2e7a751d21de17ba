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


def test_interrupted_evaluation_resumes_from_its_cached_dialogues(tmp_path: Path, capsys, monkeypatch) -> None:
    import mascot.group.rollouts as rollouts

    base = ["eval", "--level", "group", "--systems", "round-robin,mascot-c", "--limit", "3", "--batch-size", "1",
            "--backend", "fake", "--run", "tiny-cpu", "--scorer", "none"]
    full = tmp_path / "full.json"
    assert mascot_main([*base, "--json", str(full)]) == 0
    real, calls = rollouts.roll_forward, []

    def interrupted(*args, **kwargs):  # the machine goes down while the fourth batch rolls out
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    cache, resumed = tmp_path / "cache", tmp_path / "resumed.json"
    monkeypatch.setattr(rollouts, "roll_forward", interrupted)
    assert mascot_main([*base, "--cache", str(cache), "--json", str(resumed)]) == 130  # Ctrl-C's exit status
    assert len(list(cache.glob("*.json"))) == 3 and not list(cache.glob(".tmp-*")) and not resumed.exists()
    monkeypatch.setattr(rollouts, "roll_forward", real)
    capsys.readouterr()
    assert mascot_main([*base, "--cache", str(cache), "--json", str(resumed)]) == 0
    assert "3 batches loaded, 3 rolled out and saved" in capsys.readouterr().out
    a, b = json.loads(full.read_text()), json.loads(resumed.read_text())
    for system in ("round-robin", "mascot-c"):  # the same dialogues and scores as the uninterrupted run
        assert a["systems"][system]["dialogues"] == b["systems"][system]["dialogues"]
        assert a["systems"][system]["per_scenario"] == b["systems"][system]["per_scenario"]
        assert a["systems"][system]["decisions"] == b["systems"][system]["decisions"]
    # other settings never read these files: more user turns roll everything out again
    assert mascot_main([*base, "--cache", str(cache), "--user-turns", "3"]) == 0
    assert "0 batches loaded, 6 rolled out" in capsys.readouterr().out
    # min_speakers only matters to the LLM directors: the random and round-robin batches serve a run that differs there
    llm = ["eval", "--level", "group", "--systems", "mascot-p,round-robin", "--limit", "2", "--batch-size", "1",
           "--backend", "fake", "--run", "tiny-cpu", "--scorer", "none", "--cache", str(tmp_path / "c2")]
    assert mascot_main([*llm, "--min-speakers", "3"]) == 0
    capsys.readouterr()
    assert mascot_main([*llm, "--min-speakers", "2"]) == 0
    assert "2 batches loaded, 2 rolled out" in capsys.readouterr().out


def test_a_judge_failure_is_counted_and_left_out_without_aborting(tmp_path: Path, capsys, monkeypatch) -> None:
    import mascot.judges.group as group_judges

    real = group_judges.load_group_judge

    class Flaky:
        """The offline judge, except that one block (the first it is shown) always raises."""

        def __init__(self, judge) -> None:
            self.judge, self.poisoned = judge, None

        def describe(self) -> str:
            return self.judge.describe()

        def score_blocks(self, blocks):
            self.poisoned = self.poisoned or blocks[0]
            if any(b is self.poisoned for b in blocks):
                raise TimeoutError("judge endpoint timed out")
            return self.judge.score_blocks(blocks)

    monkeypatch.setattr(group_judges, "load_group_judge", lambda name: Flaky(real(name)))
    out, md = tmp_path / "g.json", tmp_path / "g.md"
    assert mascot_main(["eval", "--level", "group", "--systems", "round-robin", "--limit", "2", "--backend", "fake",
                        "--run", "tiny-cpu", "--scorer", "none", "--json", str(out), "--markdown", str(md)]) == 0
    printed = capsys.readouterr().out
    s = json.loads(out.read_text())["systems"]["round-robin"]
    assert s["judge_failures"] == 1 and s["judged_blocks"] > 1 and "TimeoutError" in s["judge_errors"][0]
    assert not any(math.isnan(x) for x in s["per_scenario"])  # the other blocks still score every scenario
    assert f"1 of {s['judged_blocks']} judged blocks failed" in printed and f"1/{s['judged_blocks']}" in md.read_text()


def test_meeting_scripts_roll_out_with_the_meeting_pack_by_meeting_type(tmp_path: Path) -> None:
    from mascot.simusers import load_scripts

    scripts = load_scripts("qmsum", "test")
    assert len(scripts) == 12 and all(s.setting == "meeting" and len(s.turns) == 2 for s in scripts)
    assert {s.meta["domain"] for s in scripts} == {"academic", "committee", "product"}
    out = tmp_path / "m.json"
    assert mascot_main(["eval", "--level", "group", "--pack", "meeting", "--scripts", "qmsum", "--split", "test",
                        "--systems", "mascot,round-robin", "--limit", "3", "--backend", "fake", "--scorer", "none",
                        "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["systems"]["mascot"]["by_valence"]) == {"academic"} and res["tests"]["round-robin"]
    speakers = {t["speaker"] for d in res["systems"]["mascot"]["dialogues"] for t in d["turns"] if t["speaker"] != "user"}
    assert speakers <= {"Recorder", "Decision Organizer", "Action-Item Proposer", "Omission Checker"} and speakers
    with pytest.raises(ConfigError, match="qmsum"):
        load_scripts("minutes", "test")
