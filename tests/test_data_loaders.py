"""Scenario loaders: the bundled files, the original formats from local paths, and the errors for
missing or malformed files (path, expected format and where to get the dataset)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from mascot.data import (
    BUNDLED_DIR,
    ED_EMOTIONS,
    DatasetError,
    Scenario,
    load_empathetic_dialogues,
    load_esconv,
    load_qmsum,
    load_scenarios,
    valence_of,
)
from mascot.group.dialogue import USER
from mascot.safety.detector import CrisisDetector

ED_HEADER = "conv_id,utterance_idx,context,prompt,speaker_idx,utterance,selfeval,tags"


def test_valence_mapping_covers_all_32_emotions() -> None:
    assert len(ED_EMOTIONS) == 32 and all(valence_of(e) for e in ED_EMOTIONS)
    assert Counter(valence_of(e) for e in ED_EMOTIONS) == {"negative": 16, "positive": 11, "neutral": 5}
    assert valence_of("Terrified") == "negative" and valence_of("trusting") == "positive" and valence_of("xyz") == ""


def test_bundled_set_sizes_and_split() -> None:
    ed = load_scenarios("bundled:ed")
    assert len(ed) >= 120
    by_valence = Counter(s.valence for s in ed)
    assert all(by_valence[v] >= 30 for v in ("positive", "negative", "neutral")), by_valence
    assert len({s.emotion for s in ed}) == 32
    test = [s for s in ed if s.split == "test"]
    assert len(test) >= 30 and len(set(Counter(s.valence for s in test).values())) == 1  # balanced
    meetings = load_scenarios("bundled:qmsum")
    assert len({s.meta["file"] + s.domain + s.id.rsplit("-q", 1)[0] for s in meetings}) >= 30
    assert {s.domain for s in meetings} == {"academic", "committee", "product"}
    assert all(s.setting == "meeting" and s.situation.startswith(s.domain.capitalize()) for s in meetings)
    ood = load_scenarios("bundled:esconv")
    assert len(ood) >= 20 and all(s.split == "test" and s.group == "esconv-ood" for s in ood)
    # deterministic, disjoint splits; ids unique
    everything = load_scenarios("bundled")
    assert [s.id for s in everything] == [s.id for s in load_scenarios("bundled")]
    assert len({s.id for s in everything}) == len(everything)
    assert {s.id for s in load_scenarios("bundled-test")}.isdisjoint(s.id for s in load_scenarios("bundled", split="train"))
    assert not any(s.source == "esconv" for s in load_scenarios("bundled-train"))


def test_bundled_openings_are_varied_and_not_crisis_language() -> None:
    scenarios = load_scenarios("bundled")
    openings = [s.opening for s in scenarios if s.setting == "emotional-support"]
    assert len(set(openings)) == len(openings)
    meetings = [(s.situation, s.opening) for s in scenarios if s.setting == "meeting"]
    assert len(set(meetings)) == len(meetings)  # "Summarize the meeting." recurs, over different meetings
    assert len({o.split()[0] for o in openings}) > 40  # not one template
    # data quality: no opening uses crisis phrasing (the pattern layer). The classifier's false alarms on
    # ordinary openings are measured by `python -m mascot safety eval` (docs/safety.md), not asserted here.
    patterns = CrisisDetector(use_classifier=False)
    assert not [s.id for s in scenarios if patterns.check(s.opening, record=False).is_crisis]


def test_scenario_to_dialogue() -> None:
    s = load_scenarios("bundled-test")[0]
    d = s.to_dialogue()
    assert d.turns[-1].speaker == USER and d.last_user_text() == s.last_user
    assert d.situation == s.situation and d.emotion == s.emotion
    d.add(d.turns[0])
    assert len(s.to_dialogue().turns) == len(s.turns)  # a fresh copy each time
    assert Scenario.from_dict(s.to_dict()) == s


def test_ed_original_format(tmp_path: Path) -> None:
    f = tmp_path / "test.csv"
    f.write_text(
        ED_HEADER + "\n"
        "hit:0_conv:1,1,sentimental,I remember going to the fireworks with my best friend_comma_ it was magic.,1,"
        "I remember going to see the fireworks with my best friend. It was the first time we ever spent time alone together.,5|5|5_2|2|5,\n"
        "hit:0_conv:1,2,sentimental,I remember going to the fireworks with my best friend_comma_ it was magic.,0,Was this a friend you were in love with?,5|5|5_2|2|5,\n"
        "hit:1_conv:2,1,afraid,A car nearly hit me.,1,I almost got hit by a car_comma_ I'm still shaking.,,,extra,fields\n",
        encoding="utf-8",
    )
    scenarios = load_empathetic_dialogues(f)
    assert [s.id for s in scenarios] == ["ed-hit_0_conv_1", "ed-hit_1_conv_2"]
    first = scenarios[0]
    assert first.situation == "I remember going to the fireworks with my best friend, it was magic."
    assert first.turns == [(USER, "I remember going to see the fireworks with my best friend. It was the first time we ever spent time alone together.")]
    assert (first.valence, first.split, first.meta["n_utterances"]) == ("neutral", "test", 2)
    assert scenarios[1].turns[0][1] == "I almost got hit by a car, I'm still shaking." and scenarios[1].valence == "negative"
    assert load_scenarios(f"empathetic_dialogues:{tmp_path}", split="train") == []  # test.csv is the test split


@pytest.mark.parametrize(
    "content, match",
    [
        ("", "is empty"),
        ("conv_id,utterance_idx,speaker\nx,1,a\n", r"header lacks column\(s\) context, prompt, speaker_idx, utterance"),
        (ED_HEADER + "\nhit:0,one,sad,p,1,u,,\n", r"line 2: utterance_idx 'one' is not an integer"),
        (ED_HEADER + "\nhit:0,1,sad\n", "line 2 has 3 fields"),
    ],
)
def test_ed_malformed_names_path_format_and_source(tmp_path: Path, content: str, match: str) -> None:
    f = tmp_path / "train.csv"
    f.write_text(content, encoding="utf-8")
    with pytest.raises(DatasetError, match=match) as err:
        load_empathetic_dialogues(f)
    msg = str(err.value)
    assert str(f) in msg and "conv_id,utterance_idx,context,prompt" in msg
    assert "github.com/facebookresearch/EmpatheticDialogues" in msg and "nothing is downloaded" in msg


def test_missing_files_name_path_and_source(tmp_path: Path) -> None:
    cases = [
        (load_empathetic_dialogues, "EmpatheticDialogues"),
        (load_esconv, "thu-coai/Emotional-Support-Conversation"),
        (load_qmsum, "Yale-LILY/QMSum"),
    ]
    for loader, source in cases:
        missing = tmp_path / "nope" / "file"
        with pytest.raises(DatasetError, match="does not exist") as err:
            loader(missing)
        assert str(missing) in str(err.value) and source in str(err.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match=r"folder without any \*.jsonl file"):
        load_qmsum(tmp_path / "empty")
    with pytest.raises(DatasetError, match="needs a local path"):
        load_scenarios("qmsum")
    with pytest.raises(DatasetError, match="Valid loaders: empathetic_dialogues, esconv, qmsum, bundled"):
        load_scenarios("empathetic")
    with pytest.raises(DatasetError, match="Valid splits"):
        load_scenarios("bundled", split="dev")


def test_esconv_format_and_errors(tmp_path: Path) -> None:
    data = [{
        "emotion_type": "anxiety", "problem_type": "job crisis", "situation": "I may lose my job.", "experience_type": "x",
        "dialog": [
            {"speaker": "seeker", "annotation": {}, "content": "Hi\n"},
            {"speaker": "supporter", "annotation": {"strategy": "Question"}, "content": "Hello, how are you?"},
            {"speaker": "seeker", "annotation": {}, "content": "Not good, my company is laying people off and I am scared."},
            {"speaker": "supporter", "annotation": {}, "content": "That sounds stressful."},
        ],
    }]
    f = tmp_path / "ESConv.json"
    f.write_text(json.dumps(data), encoding="utf-8")
    [s] = load_esconv(f)
    assert s.turns == [(USER, "Hi Not good, my company is laying people off and I am scared.")]
    assert (s.valence, s.split, s.source, s.meta["problem_type"]) == ("negative", "test", "esconv", "job crisis")
    assert load_scenarios(str(f))[0] == s  # format detected from the extension
    data[0]["dialog"][2]["speaker"] = "listener"
    f.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"turn \[2\] needs speaker seeker\|supporter") as err:
        load_esconv(f)
    assert "emotion_type, problem_type, situation" in str(err.value)
    f.write_text("{not json", encoding="utf-8")
    with pytest.raises(DatasetError, match="is not valid JSON"):
        load_esconv(f)


def test_qmsum_format_and_errors(tmp_path: Path) -> None:
    meeting = {
        "topic_list": [],
        "meeting_transcripts": [{"speaker": f"S{i}", "content": f"point {i} {{vocalsound}} here"} for i in range(6)],
        "general_query_list": [{"query": "Summarize the meeting.", "answer": "..."}],
        "specific_query_list": [{"query": "What about point 3?", "answer": "...", "relevant_text_span": [["3", "4"]]}],
    }
    d = tmp_path / "Product" / "jsonl"
    d.mkdir(parents=True)
    (d / "val.jsonl").write_text(json.dumps(meeting) + "\n", encoding="utf-8")
    general, specific = load_qmsum(tmp_path)
    assert general.domain == specific.domain == "product" and general.split == "train" and general.group == "product"
    assert general.turns == [(USER, "Summarize the meeting.")] and "S5: point 5 here" in general.situation
    assert specific.situation == "Product meeting excerpt:\nS3: point 3 here\nS4: point 4 here"
    (d / "test.jsonl").write_text(json.dumps({"meeting_transcripts": []}) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"test.jsonl: line 1 lacks a meeting_transcripts list") as err:
        load_qmsum(tmp_path)
    assert "general_query_list" in str(err.value)
    (d / "test.jsonl").write_text("{oops\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="line 1 is not valid JSON"):
        load_scenarios(f"qmsum:{tmp_path}")


def test_bundled_files_are_in_the_original_formats() -> None:
    """The bundled files parse with the same loaders as the real datasets (no special casing)."""
    assert (BUNDLED_DIR / "empatheticdialogues" / "test.csv").read_text().startswith(ED_HEADER)
    assert len(load_empathetic_dialogues(BUNDLED_DIR / "empatheticdialogues")) >= 120
    assert len(load_qmsum(BUNDLED_DIR / "qmsum")) >= 60
    assert len(load_esconv(BUNDLED_DIR / "esconv" / "ESConv.json")) >= 20
