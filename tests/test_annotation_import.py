"""Imports: every row validated first; any bad row -> error naming its line, and nothing imported."""

from __future__ import annotations

import json

import pytest

from annotation.errors import ImportValidationError
from annotation.frames import load_judgments
from annotation.importing import import_judgments, import_pairs
from annotation.schemas import StudyConfig
from tests.annotation_fixtures import make_store, pair_line, seed_study, write_jsonl

pytestmark = pytest.mark.usefixtures("annotation_db")  # each test on SQLite and on PostgreSQL


@pytest.fixture
def store(tmp_path):
    s = make_store(tmp_path)
    s.create_study(config=StudyConfig(id="s1"))
    yield s
    s.close()


def test_valid_pairs_import_with_turn_aliases(store, tmp_path):
    rows = [
        pair_line("a1"),
        {
            "item_id": 7,
            "context": [{"role": "user", "content": "I failed."}],
            "a": {"system": "MASCOT", "turns": ["plain string turn"]},
            "b": {"system": "SFT", "dialogue": [{"name": "Coach", "content": "Try again."}]},
            "meta": {"emotion": "sad"},
        },
    ]
    report = import_pairs(store, study_id="s1", path=write_jsonl(tmp_path / "p.jsonl", rows))
    assert report.added == 2 and report.systems == ["Few-Shot CoT", "MASCOT", "SFT"]
    assert report.leak_items == {} and report.warnings == []
    assert store.overview(study_id="s1").items == 2


def test_any_bad_row_rejects_the_whole_file_with_line_numbers(store, tmp_path):
    good = json.dumps(pair_line("ok1"))
    lines = [
        good,  # 1 ok
        "{not json",  # 2
        json.dumps({**pair_line("x2"), "contxt": "typo"}),  # 3 unknown key
        "",  # 4 blank: skipped
        json.dumps(pair_line("x5", a="Same", b="Same")),  # 5 same system
        json.dumps({k: v for k, v in pair_line("x6").items() if k != "b"}),  # 6 missing side
        json.dumps(pair_line("ok1")),  # 7 duplicate id
        json.dumps({**pair_line("x8"), "attention_check": True}),  # 8 check without answer
        json.dumps({**pair_line("x9"), "a": {"system": "M", "dialogue": []}}),  # 9 empty dialogue
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ImportValidationError) as info:
        import_pairs(store, study_id="s1", path=path)
    assert [line for line, _ in info.value.problems] == [2, 3, 5, 6, 7, 8, 9]
    message = str(info.value)
    assert "line 2: not valid JSON" in message and "line 7: duplicate id 'ok1' (first on line 1)" in message
    assert "nothing was imported" in message
    assert store.overview(study_id="s1").items == 0
    assert store.systems(study_id="s1") == []


def test_ids_already_in_the_study_are_rejected_atomically(store, tmp_path):
    import_pairs(store, study_id="s1", path=write_jsonl(tmp_path / "a.jsonl", [pair_line("i1")]))
    with pytest.raises(ImportValidationError, match="line 2: id 'i1' is already in study"):
        import_pairs(
            store, study_id="s1", path=write_jsonl(tmp_path / "b.jsonl", [pair_line("new"), pair_line("i1")])
        )
    assert store.overview(study_id="s1").items == 1


def test_leaks_are_flagged(store, tmp_path):
    rows = [pair_line("clean"), pair_line("leak", text_b="I am few-shot cot, happy to help")]
    report = import_pairs(store, study_id="s1", path=write_jsonl(tmp_path / "p.jsonl", rows))
    assert report.leak_items == {"leak": ["Few-Shot CoT"]}
    assert "name a system" in report.warnings[0]


def test_attention_items_need_a_valid_answer(store, tmp_path):
    ok = import_pairs(
        store, study_id="s1", path=write_jsonl(tmp_path / "c.jsonl", [pair_line("c", check="b")])
    )
    assert ok.added == 1 and store.overview(study_id="s1").attention_items == 1
    with pytest.raises(ImportValidationError, match="expected"):
        import_pairs(
            store, study_id="s1", path=write_jsonl(tmp_path / "d.jsonl", [pair_line("d", check="left")])
        )


def write_csv(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_judgments_csv_maps_system_names(store, tmp_path):
    import_pairs(
        store, study_id="s1", path=write_jsonl(tmp_path / "p.jsonl", [pair_line("i1"), pair_line("i2")])
    )
    csv_path = write_csv(
        tmp_path / "j.csv",
        (
            "item_id,annotator,choice,left_system,helpfulness_a,helpfulness_b,seconds,comment\n"
            "i1,ann1,mascot,Few-Shot CoT,5,3,41.5,nice\n"
            "i1,ann2,Few-Shot CoT,,,,,\n"
            "i2,ann1,both bad,,,,,\n"
        ),
    )
    report = import_judgments(store, study_id="s1", path=csv_path)
    assert report.added == 3
    frame = load_judgments(store, study_id="s1").set_index(["item_id", "annotator"])
    assert frame.loc[("i1", "ann1"), "winner"] == "MASCOT"
    assert frame.loc[("i1", "ann1"), "left_system"] == "Few-Shot CoT"
    assert (frame.loc[("i1", "ann1"), "helpfulness_a"], frame.loc[("i1", "ann1"), "seconds"]) == (5, 41.5)
    assert frame.loc[("i1", "ann2"), "winner"] == "Few-Shot CoT"
    assert frame.loc[("i2", "ann1"), "choice"] == "both_bad"
    assert set(frame.source) == {"import"}
    # Imported judgments count toward k: i1 is complete, so no one is assigned it again.
    assert store.overview(study_id="s1").complete_items == 1


def test_bad_judgment_rows_import_nothing(store, tmp_path):
    import_pairs(store, study_id="s1", path=write_jsonl(tmp_path / "p.jsonl", [pair_line("i1")]))
    csv_path = write_csv(
        tmp_path / "j.csv",
        (
            "item_id,annotator,choice,helpfulness_a\n"
            "i1,ann1,MASCOT,4\n"  # line 2 ok
            "zzz,ann1,MASCOT,\n"  # line 3 unknown item
            "i1,ann2,GPT-5,\n"  # line 4 system not in this pair
            "i1,ann3,tie,7\n"  # line 5 rating out of range
            "i1,ann1,tie,\n"  # line 6 duplicate (item, annotator)
            "i1,,tie,\n"  # line 7 no annotator
        ),
    )
    with pytest.raises(ImportValidationError) as info:
        import_judgments(store, study_id="s1", path=csv_path)
    assert [line for line, _ in info.value.problems] == [3, 4, 5, 6, 7]
    assert "'GPT-5' is not one of ['MASCOT', 'Few-Shot CoT', 'tie', 'both_bad']" in str(info.value)
    assert len(load_judgments(store, study_id="s1")) == 0


def test_judgments_header_is_checked(store, tmp_path):
    with pytest.raises(
        ImportValidationError,
        match="line 1: header is missing \\['choice'\\].*1 unknown column\\(s\\), at position\\(s\\) \\[3\\]",
    ) as info:
        import_judgments(
            store, study_id="s1", path=write_csv(tmp_path / "h.csv", "item_id,annotator,helpfulnes_a\n")
        )
    # The header is the file's content: the message names the column's position, never its text.
    assert "helpfulnes_a" not in str(info.value)


def test_judgment_already_in_db_is_a_duplicate(tmp_path):
    store = make_store(tmp_path)
    seed_study(store, tmp_path, n_items=1)
    task = store.next_task(study_id="s1", annotator="ann1")
    store.submit(token=task.token, choice="A")
    with pytest.raises(ImportValidationError, match="line 2: annotator 'ann1' already judged item 'i0'"):
        import_judgments(
            store,
            study_id="s1",
            path=write_csv(tmp_path / "j.csv", "item_id,annotator,choice\ni0,ann1,tie\n"),
        )
