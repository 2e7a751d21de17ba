"""Reply stems measured by the scorer: candidates file checks, one batch of draws per persona and stem, the
per-stem report and the greedy stem set, and the records written for blind labelling."""

from __future__ import annotations

import json

import pytest

from mascot.acceptability.stems import by_stem_table, load_candidates, measure_stems
from mascot.backends import load_backend
from mascot.data import Scenario
from mascot.errors import ConfigError
from mascot.group.personas import load_pack
from tests.test_acceptability import tiny_scorer


def _scenarios() -> list[Scenario]:
    texts = ["My dog died this morning.", "I got the job I wanted!", "Moving house next week."]
    return [Scenario(id=f"s{i}", setting="emotional-support", source="test", emotion=e, situation=t, turns=[("user", t)])
            for i, (t, e) in enumerate(zip(texts, ("sad", "joyful", "anticipating")))]


def test_candidates_file_is_checked(tmp_path):
    pack = load_pack("emotional-support")
    path = tmp_path / "c.yaml"
    path.write_text("Anchor: ['', 'That sounds']\n")
    assert load_candidates(path, pack) == {"Anchor": ["", "That sounds"]}
    path.write_text("Nobody: ['Hi']\n")
    with pytest.raises(ConfigError, match="Anchor"):
        load_candidates(path, pack)
    path.write_text("Anchor: That sounds\n")
    with pytest.raises(ConfigError, match="list of strings"):
        load_candidates(path, pack)


def test_every_stem_is_drawn_scored_and_recorded(tmp_path):
    pack = load_pack("emotional-support")
    cands = {"Anchor": ["", "That sounds", "I'm so sorry"], "Catalyst": ["How are you feeling about"]}
    report, records = measure_stems(load_backend("fake"), pack, _scenarios(), cands, tiny_scorer(), system="prompted",
                                    draws=2, set_size=2, progress=False, output=tmp_path)
    anchor = report["personas"]["Anchor"]
    assert set(anchor["stems"]) == {"(none)", "That sounds", "I'm so sorry"}
    assert all(s["n"] == 6 and 0 <= s["score"] <= 1 for s in anchor["stems"].values())
    assert [len(step["stems"]) for step in anchor["greedy_set"]] == [1, 2]
    assert anchor["greedy_set"][1]["score"] >= anchor["greedy_set"][0]["score"]
    assert len(records) == 3 * 3 * 2 + 3 * 2 and len({r["id"] for r in records}) == len(records)
    assert all(r["reply"].startswith(r["stem"]) for r in records)
    written = [json.loads(line) for line in (tmp_path / "replies.jsonl").read_text().splitlines()]
    assert written == records and json.loads((tmp_path / "report.json").read_text()) == report
    assert "greedy set" in by_stem_table(report)


def test_sampled_replies_are_written_with_sources_and_blind_batches_without(tmp_path):
    from mascot.acceptability.sampling import BLIND_FIELDS, Draw, sample_replies

    pack = load_pack("emotional-support")
    draws = [Draw.parse("prompted@0.6#0"), Draw.parse("zero-shot@1.0#1")]
    summary = sample_replies(load_backend("fake"), pack, _scenarios(), draws, tmp_path / "a", batches_of=5,
                             progress=False)
    rows = [json.loads(x) for x in (tmp_path / "a/replies.jsonl").read_text().splitlines()]
    assert summary["replies"] == len(rows) > 0 and {r["system"] for r in rows} == {"prompted", "zero-shot"}
    blind = [json.loads(x) for f in sorted((tmp_path / "a/blind").glob("*.jsonl")) for x in f.read_text().splitlines()]
    assert sorted(b["id"] for b in blind) == sorted(r["id"] for r in rows)
    assert all(set(b) == set(BLIND_FIELDS) for b in blind)
    # a named run is part of the source: its replies get their own system label and ids
    sample_replies(load_backend("fake"), pack, _scenarios(), draws[:1], tmp_path / "b", run="other", progress=False)
    other = [json.loads(x) for x in (tmp_path / "b/replies.jsonl").read_text().splitlines()]
    assert {r["system"] for r in other} == {"prompted[other]"}
    assert not {r["id"] for r in other} & {r["id"] for r in rows}


def test_a_tagged_sample_is_its_own_source(tmp_path):
    from mascot.acceptability.sampling import Draw, sample_replies

    pack, draws = load_pack("emotional-support"), [Draw.parse("prompted@0.6#0")]
    sample_replies(load_backend("fake"), pack, _scenarios(), draws, tmp_path / "a", progress=False)
    sample_replies(load_backend("fake"), pack, _scenarios(), draws, tmp_path / "b", progress=False, tag="variant")
    plain, tagged = ([json.loads(x) for x in (tmp_path / d / "replies.jsonl").read_text().splitlines()] for d in "ab")
    assert {r["system"] for r in tagged} == {"prompted:variant"} and {r["system"] for r in plain} == {"prompted"}
    assert not {r["id"] for r in plain} & {r["id"] for r in tagged}


def test_all_draws_of_a_careful_turn_are_written_beside_the_one_shown(tmp_path):
    from collections import defaultdict

    from mascot.acceptability.sampling import Draw, sample_replies

    pack, draws = load_pack("emotional-support"), [Draw.parse("prompted+best3+stems@0.6#0")]
    sample_replies(load_backend("fake"), pack, _scenarios(), draws, tmp_path / "shown", progress=False)
    sample_replies(load_backend("fake"), pack, _scenarios(), draws, tmp_path / "all", progress=False, all_draws=True)
    shown, every = ([json.loads(x) for x in (tmp_path / d / "replies.jsonl").read_text().splitlines()]
                    for d in ("shown", "all"))
    groups = defaultdict(list)
    for r in every:
        groups[r["group"]].append(r)
    assert len(groups) == len(shown) and len({r["id"] for r in every}) == len(every)
    for rows in groups.values():
        assert [r["chosen"] for r in rows].count(True) == 1 and 1 <= len(rows) <= 3
        assert len({r["reply"] for r in rows}) == len(rows) and all(0 <= r["acceptability"] <= 1 for r in rows)
        assert len({json.dumps(r["context"]) for r in rows}) == 1  # every draw answered the same conversation
    # the draws shown are exactly what the sample without --all-draws holds
    chosen = sorted((r["id"], r["reply"]) for r in every if r["chosen"])
    assert chosen == sorted((r["id"], r["reply"]) for r in shown)
    assert any(len(rows) > 1 for rows in groups.values())
    blind = [json.loads(x) for f in (tmp_path / "all/blind").glob("*.jsonl") for x in f.read_text().splitlines()]
    assert sorted(b["id"] for b in blind) == sorted(r["id"] for r in every) and "chosen" not in blind[0]


def test_selectors_are_scored_against_every_labelled_draw(tmp_path, capsys):
    from mascot.__main__ import main as mascot_main
    from mascot.acceptability.sampling import Draw, sample_replies

    pack, draws = load_pack("emotional-support"), [Draw.parse("prompted+best3+stems@0.6#0")]
    sample_replies(load_backend("fake"), pack, _scenarios(), draws, tmp_path / "all", progress=False, all_draws=True)
    rows = [json.loads(x) for x in (tmp_path / "all/replies.jsonl").read_text().splitlines()]
    grades = ("not_acceptable", "borderline", "acceptable")
    labels = tmp_path / "labels.jsonl"  # draw j of a turn gets grade j: the last draw is always the best
    labels.write_text("".join(json.dumps({"id": r["id"], "annotator": "t", "acceptability": grades[r["draw"]]}) + "\n"
                              for r in rows))
    out = tmp_path / "sel.json"
    assert mascot_main(["accept", "selectors", "--replies", str(tmp_path / "all/replies.jsonl"), "--labels", str(labels),
                        "--scorers", "shipped,again=shipped", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    turns = len({r["group"] for r in rows})
    assert report["turns"] == turns and report["draws"] == len(rows)
    pol = report["policies"]
    assert pol["draw0"]["not_acceptable"]["count"] == turns  # every turn's first draw was graded worst
    last = sum(1 for g in {r["group"] for r in rows} if max(r["draw"] for r in rows if r["group"] == g) == 2)
    assert pol["best"]["acceptable"]["count"] == last
    # the shipped scorer run again over the same draws shows what the sample showed
    assert pol["scorer:shipped"]["vs_shown"]["turns_differ"] == 0
    assert pol["best"]["vs_shown"]["worse"] == 0 and 0 < report["scorer_auc"]["shipped"]["auc_not_unacceptable"]["auc"] <= 1
    assert report["scorer_auc"]["again"] == report["scorer_auc"]["shipped"]  # NAME=FOLDER names a scorer
    # a sample without --all-draws cannot be scored this way
    plain = tmp_path / "plain"
    sample_replies(load_backend("fake"), pack, _scenarios(), draws, plain, progress=False)
    capsys.readouterr()
    assert mascot_main(["accept", "selectors", "--replies", str(plain / "replies.jsonl"), "--labels", str(labels)]) == 2
    assert "--all-draws" in capsys.readouterr().err
