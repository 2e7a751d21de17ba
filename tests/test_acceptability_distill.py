"""Expert iteration on acceptable replies: which draw becomes a speaker's target, and a short real fine-tune
that continues the shipped adapter into a new run folder without touching the source run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mascot.acceptability.distill import choose_targets, demonstration_targets, distill, gather, sft_examples
from mascot.errors import ConfigError
from mascot.group.personas import load_pack
from tests.test_acceptability import tiny_scorer

CTX = [{"speaker": "user", "text": "My dog died this morning and the house is so quiet."}]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _replies(tmp_path: Path) -> Path:
    rows = [
        {"id": "a", "persona": "Anchor", "context": CTX, "reply": "That sounds so lonely, the quiet must be hard."},
        {"id": "b", "persona": "Anchor", "context": CTX, "reply": "The user is sad. She smiled."},
        {"id": "c", "persona": "Anchor", "context": CTX, "reply": "How wonderful, congratulations on your news!"},
        {"id": "d", "persona": "Catalyst", "context": CTX, "reply": "What do you miss most about your dog?"},
    ]
    return _write(tmp_path / "replies.jsonl", rows)


def test_targets_prefer_human_labels_and_never_take_a_reply_labelled_not_acceptable(tmp_path):
    replies = _replies(tmp_path)
    labels = _write(tmp_path / "labels.jsonl", [
        {"id": "a", "persona": "Anchor", "context": CTX, "reply": "That sounds so lonely, the quiet must be hard.",
         "acceptability": "not_acceptable"},
        {"id": "c", "persona": "Anchor", "context": CTX, "reply": "How wonderful, congratulations on your news!",
         "acceptability": "borderline"},
    ])
    rows = gather([replies, labels])
    assert rows["a"]["labels"] == [0] and rows["b"]["labels"] == []
    # a labeller's file of ids and labels only joins the replies read before it; unknown ids are ignored
    bare = _write(tmp_path / "bare.jsonl", [{"id": "b", "acceptability": "borderline"}, {"id": "zz", "acceptability": "acceptable"}])
    assert gather([replies, bare])["b"]["labels"] == [1] and "zz" not in gather([replies, bare])
    targets = {t["id"] for t in choose_targets(rows, tiny_scorer(), min_score=0.0)}
    assert targets == {"c", "d"}  # a is labelled not acceptable; c's label outranks b's unlabelled draw
    # without labels the scorer ranks: the faulty draws lose to the clean one
    assert {t["id"] for t in choose_targets(gather([replies]), tiny_scorer(), min_score=0.0)} == {"a", "d"}
    assert choose_targets(gather([replies]), tiny_scorer(), min_score=1.01) == []


def test_examples_use_the_chat_speaker_prompt(tmp_path):
    pack = load_pack("emotional-support")
    ex = sft_examples(choose_targets(gather([_replies(tmp_path)]), tiny_scorer(), 0.0), pack)
    assert set(ex) == {"anchor", "catalyst"}
    row = ex["anchor"][0]
    assert row["prompt"][0]["role"] == "system" and "Anchor" in row["prompt"][0]["content"]
    assert "My dog died" in row["prompt"][1]["content"] and row["completion"][0]["content"].startswith("That sounds")


DEMO = {"id": "d1", "opening": "My dog died this morning and the house is so quiet.",
        "Anchor": "That sounds so lonely, with the house quiet the morning he died.",
        "Catalyst": "How are you feeling about the first evening without him?",
        "Beacon": "It says a lot about you that you notice how much he filled the house."}


def test_demonstrations_give_each_persona_the_replies_written_before_its_own(tmp_path):
    pack = load_pack("emotional-support")
    targets = demonstration_targets([_write(tmp_path / "demos.jsonl", [DEMO])], pack)
    assert [t["persona"] for t in targets] == ["Anchor", "Catalyst", "Beacon"]
    assert [len(t["context"]) for t in targets] == [1, 2, 3]
    assert targets[2]["context"][2] == {"speaker": "Catalyst", "text": DEMO["Catalyst"]}
    assert targets[1]["id"] == "d1:Catalyst" and targets[0]["reply"] == DEMO["Anchor"]
    ex = sft_examples([dict(t, score=1.0) for t in targets], pack)
    assert DEMO["Anchor"] in ex["catalyst"][0]["prompt"][1]["content"]  # the earlier reply is in the prompt
    assert ex["beacon"][0]["completion"][0]["content"] == DEMO["Beacon"]


def test_a_demonstration_without_an_opening_or_replies_is_refused_with_the_row(tmp_path):
    pack = load_pack("emotional-support")
    with pytest.raises(ConfigError, match=r"row 2: .*Anchor, Catalyst, Beacon"):
        demonstration_targets([_write(tmp_path / "demos.jsonl", [DEMO, {"opening": "hi", "Ancho": "typo"}])], pack)
    with pytest.raises(ConfigError, match="Nothing to learn from"):
        distill(pack, [], Path("checkpoints/tiny-cpu"), tmp_path / "new", scorer=tiny_scorer())
    assert not (tmp_path / "new").exists()


def test_distill_refuses_an_existing_output_and_writes_nothing(tmp_path):
    pack = load_pack("emotional-support")
    out = tmp_path / "exists"
    out.mkdir()
    with pytest.raises(ConfigError, match="exists"):
        distill(pack, [_replies(tmp_path)], Path("checkpoints/tiny-cpu"), out, scorer=tiny_scorer())
    assert list(out.iterdir()) == []


@pytest.mark.train
@pytest.mark.model
def test_distill_continues_the_shipped_adapters_into_a_new_run(tmp_path):
    pack = load_pack("emotional-support")
    src = Path("checkpoints/tiny-cpu")
    before = (src / "speakers/anchor/adapter_model.safetensors").read_bytes()
    out = tmp_path / "tiny-cpu-accept"
    card = distill(pack, [_replies(tmp_path)], src, out, min_score=0.0, max_steps=1, scorer=tiny_scorer())
    assert card["personas"]["Anchor"]["steps"] == 1 and card["personas"]["Beacon"] == {"skipped": "no targets"}
    demos = distill(pack, [], src, tmp_path / "demos-run", max_steps=1, scorer=tiny_scorer(),
                    demos=[_write(tmp_path / "demos.jsonl", [DEMO])])
    assert demos["personas"]["Beacon"]["examples"] == 1 and demos["demonstrations"]
    assert (out / "speakers/anchor/adapter_model.safetensors").read_bytes() != before
    assert (out / "director").is_dir() and (out / "distill.json").exists() and not (out / "work").exists()
    assert (src / "speakers/anchor/adapter_model.safetensors").read_bytes() == before
    assert not out.with_name(out.name + ".partial").exists()
