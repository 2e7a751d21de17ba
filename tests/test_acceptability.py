"""The acceptability layer: fault detectors, the scorer's file format, best-of-N selection through the chat's one
step, stems, the eval system modifiers, the pair filter and the Stage-1 reward. A small scorer with a hashing
encoder stands in for the shipped one, so these tests need no model."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from mascot.acceptability.faults import FEATURE_NAMES, detect
from mascot.acceptability.labels import LABELS, load_labelled, to_store_files
from mascot.acceptability.scorer import HIDDEN, AcceptabilityScorer, features
from mascot.acceptability.selection import Selector, load_selector
from mascot.backends import load_backend
from mascot.errors import ConfigError, InputError
from mascot.evaluation.systems import make_system
from mascot.group.chat import OFFLINE, GroupChat, TurnEvent
from mascot.group.dialogue import Dialogue, Turn
from mascot.group.engine import Engine, EngineConfig
from mascot.group.speaker import MAX_BEST_OF, check_best_of, join_stem
from mascot.train.stage1.pairs import build_pairs


class HashEncoder:
    """Deterministic pseudo-embeddings: the same text always gets the same vector."""

    hidden = HIDDEN

    def embed(self, texts):
        out = np.zeros((len(texts), HIDDEN), np.float32)
        for i, t in enumerate(texts):
            seed = int(hashlib.sha1(t.encode()).hexdigest()[:8], 16)
            out[i] = np.random.default_rng(seed).standard_normal(HIDDEN)
        return out


def tiny_scorer(personas=("Anchor", "Catalyst", "Beacon")) -> AcceptabilityScorer:
    """A scorer whose acceptability falls with every fault found (weights on the fault features only)."""
    n = HIDDEN * 2 + 1 + len(FEATURE_NAMES)
    w = np.zeros((n, 3), np.float32)
    for k in range(7):  # the fault detectors, in FEATURE_NAMES order
        w[HIDDEN * 2 + 1 + k] = [3.0, 0.0, -3.0]
    return AcceptabilityScorer(w, np.array([0.0, 0.5, 1.0], np.float32),
                               np.zeros(len(personas) * (HIDDEN + 1), np.float32), 0.0, list(personas),
                               {"threshold": 0.5}, encoder=HashEncoder())


def dialogue(text: str = "My dog died this morning and the house is so quiet.", emotion: str = "sad") -> Dialogue:
    return Dialogue([Turn("user", text)], "", emotion)


def test_fault_detectors_find_the_rubric_faults():
    d = dialogue()
    assert "third_person" in detect(d, "The user is sad about their dog.").found()
    assert "own_life" in detect(d, "When I was young my mom had a dog too.").found()
    assert "wrong_tone" in detect(d, "How wonderful, congratulations!").found()
    assert "narration" in detect(d, "She smiled. Then she walked away.").found()
    assert "meta_talk" in detect(d, "The previous conversation has led us to consider your perspective.").found()
    assert "unfinished" in detect(d, "I am so sorry about your dog and").found()
    clean = detect(d, "I'm so sorry about your dog. The quiet must make the loss feel very real.")
    assert clean.found() == [] and clean.overlap > 0
    # celebrating good news is right
    assert detect(dialogue("I got the job!", "proud"), "Congratulations, you earned that job!").found() == []


def test_scorer_round_trip_and_scores(tmp_path):
    s = tiny_scorer()
    s.save(tmp_path / "m")
    loaded = AcceptabilityScorer.load(tmp_path / "m")
    loaded._encoder = HashEncoder()
    good, bad = loaded.score(dialogue(), "Anchor", ["I'm so sorry about your dog. The house must feel empty.",
                                                     "The user has faced challenges. How wonderful!"])
    assert 0.0 <= bad.acceptability < good.acceptability <= 1.0
    assert set(bad.faults) >= {"third_person", "wrong_tone"} and good.faults == []
    assert abs(good.p_acceptable + good.p_unacceptable) <= 1.0
    assert good.persona_fit == pytest.approx(0.5)  # zero fit weights: no opinion
    assert loaded.score(dialogue(), "Nobody", ["I'm sorry."])[0].persona_fit == 0.5  # unknown persona


def test_missing_or_stale_scorer_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="mascot accept train"):
        AcceptabilityScorer.load(tmp_path)
    tiny_scorer().save(tmp_path)
    card = json.loads((tmp_path / "scorer.json").read_text())
    (tmp_path / "scorer.json").write_text(json.dumps({**card, "features": ["old"]}))
    with pytest.raises(ConfigError, match="retrain"):
        AcceptabilityScorer.load(tmp_path)


def test_features_have_one_column_per_named_feature():
    f = [detect(dialogue(), "I'm sorry.")]
    x = features(np.ones((1, HIDDEN)), np.ones((1, HIDDEN)), f)
    assert x.shape == (1, 2 * HIDDEN + 1 + len(FEATURE_NAMES))


def test_selector_prefers_an_unflagged_draw_and_says_when_all_are_flagged(es_pack):
    sel = Selector(tiny_scorer())
    anchor = es_pack.get("Anchor")
    texts = ["The user is sad. How wonderful!", "I'm so sorry about your dog. The quiet must be hard."]
    choice = sel.choose(dialogue(), anchor, texts)
    assert choice.index == 1 and choice.info["all_flagged"] is False and choice.info["best_of"] == 2
    bad = ["The user is sad.", "The user is sad. How wonderful!"]
    choice = sel.choose(dialogue(), anchor, bad)
    assert choice.info["all_flagged"] is True and choice.index == 0  # the least bad: one fault, not two


def test_best_of_range_is_checked():
    assert check_best_of(1) == 1 and check_best_of(MAX_BEST_OF) == MAX_BEST_OF
    for bad in (0, MAX_BEST_OF + 1, 2.5, True):
        with pytest.raises(InputError, match=f"from 1 to {MAX_BEST_OF}"):
            check_best_of(bad)


def test_careful_replies_go_through_the_one_step_with_selection_metadata(es_pack):
    backend = load_backend("fake")
    group = GroupChat(backend, es_pack.active, mode="round-robin", policy=OFFLINE, best_of=3, selector=Selector(tiny_scorer()))
    events = list(group.respond(Dialogue(), "My dog died this morning.", seed=1))
    turns = [e.turn for e in events if isinstance(e, TurnEvent)]
    assert turns and all(t.meta["selection"]["best_of"] == 3 for t in turns)
    batch = group.respond_batch([Dialogue()], ["My dog died this morning."], [1])[0]
    assert [t.meta["selection"]["best_of"] for t in batch] == [3] * len(batch)
    # same seed, same choice: regenerate is reproducible
    again = [e.turn.text for e in group.respond(Dialogue(), "My dog died this morning.", seed=1) if isinstance(e, TurnEvent)]
    assert again == [t.text for t in turns]


def test_a_scorer_that_cannot_load_falls_back_to_single_draws(es_pack, tmp_path, monkeypatch):
    import mascot.acceptability.scorer as scorer_mod

    monkeypatch.setattr(scorer_mod, "MODEL_DIR", tmp_path / "missing")
    selector, note = load_selector()
    assert selector is None and "did not load" in note
    engine = Engine(EngineConfig(backend="fake"), load_backend("fake"))
    group = engine.group(es_pack.active, "round-robin", replies="careful")
    assert group.speaker.best_of == 1 and not group.speaker.selecting
    assert group.run(Dialogue(), "Hello there, rough day.", seed=0)
    with pytest.raises(InputError, match="fast, careful"):
        engine.group(es_pack.active, "round-robin", replies="slow")


def test_stems_start_the_reply(es_pack):
    assert join_stem("That sounds", " hard.") == "That sounds hard."
    assert join_stem("That sounds", "hard.") == "That sounds hard."
    assert join_stem("", "Hi.") == "Hi." and join_stem("You", ", honestly.") == "You, honestly."
    anchor = es_pack.get("Anchor")
    assert anchor.stems and anchor.stem(0) == anchor.stems[0] and anchor.stem(1) == anchor.stems[1 % len(anchor.stems)]
    group = GroupChat(load_backend("fake"), [anchor], mode="round-robin", policy=OFFLINE, stems=True)
    turn = group.run(Dialogue(), "My dog died.", seed=0)[-1]
    assert turn.text.startswith(anchor.stem(0))


def test_a_reflection_stem_starts_the_reply_from_the_users_words(es_pack):
    import dataclasses

    anchor = dataclasses.replace(es_pack.get("Anchor"), stems=["So {situation}. That", "That sounds"])
    group = GroupChat(load_backend("fake"), [anchor], mode="round-robin", policy=OFFLINE, stems=True)
    assert group.run(Dialogue(), "My dog died last night.", seed=0)[-1].text.startswith("So your dog died last night. That")
    assert group.run(Dialogue(), "Hello.", seed=0)[-1].text.startswith("That sounds")  # nothing to reflect


def test_careful_draws_start_from_different_stems_and_the_selector_sees_each(es_pack):
    anchor = es_pack.get("Anchor")
    seen: list[list[str]] = []

    class Recording(Selector):
        def choose(self, dialogue, persona, texts):
            seen.append(texts)
            return super().choose(dialogue, persona, texts)

    n = len(anchor.stems)
    group = GroupChat(load_backend("fake"), [anchor], mode="round-robin", policy=OFFLINE, stems=True, best_of=n,
                      selector=Recording(tiny_scorer()))
    group.run(Dialogue(), "My dog died.", seed=5)
    assert seen and sorted(anchor.stems) == sorted(next(s for s in anchor.stems if t.startswith(s)) for t in seen[0])


def test_eval_system_modifiers():
    s = make_system("mascot+best3+stems")
    assert (s.best_of, s.stems, s.name) == (3, True, "mascot+best3+stems") and "best3" in s.label
    with pytest.raises(ConfigError, match="Valid modifiers"):
        make_system("zero-shot+loud")
    with pytest.raises(InputError, match="from 1 to"):
        make_system("zero-shot+best99")
    with pytest.raises(ConfigError, match="Valid system names"):
        make_system("nope+stems")


def test_pairs_drop_a_chosen_reply_below_the_acceptability_floor():
    group = {"candidates": ["good", "meh", "bad"], "scores": [4.0, 3.0, 2.0], "acceptability": [0.9, 0.2, 0.1]}
    pairs, stats = build_pairs([group], delta=0.5)
    assert len(pairs) == 3
    pairs, stats = build_pairs([group], delta=0.5, acceptability_floor=0.5)
    assert [(p["chosen"], p["rejected"]) for p in pairs] == [("good", "meh"), ("good", "bad")]
    assert stats.as_dict()["unacceptable_chosen"] == 1


def test_acceptability_reward_ranks_within_each_group(es_pack):
    from mascot.rewards import RewardContext, get_reward_funcs

    ctx = RewardContext(personas=es_pack.personas, roster=es_pack.active, acceptability=tiny_scorer())
    (reward,) = get_reward_funcs(["acceptability"], ctx)
    context = json.dumps(dialogue().to_dict())
    logged = {}
    out = reward(["I'm so sorry about your dog. The quiet must be hard.", "The user is sad. How wonderful!"],
                 persona=["Anchor", "Anchor"], context=[context, context], log_metric=logged.__setitem__)
    assert out[0] > out[1] and "acceptability/raw_mean" in logged


def test_labels_travel_through_the_store_files(tmp_path):
    rec = {"id": "r1", "scenario": "s1", "emotion": "sad", "valence": "negative", "situation": "x", "persona": "Anchor",
           "persona_role": "Listener", "context": [{"speaker": "user", "text": "My dog died."}],
           "reply": "I'm sorry.", "system": "mascot", "temperature": 0.6, "seed": 0}
    (tmp_path / "replies.jsonl").write_text(json.dumps(rec) + "\n")
    (tmp_path / "labels.jsonl").write_text(json.dumps({"id": "r1", "annotator": "L1", "acceptability": "borderline"}) + "\n")
    counts = to_store_files([tmp_path / "replies.jsonl"], [tmp_path / "labels.jsonl"], tmp_path / "store")
    assert counts == {"items": 1, "labels": 1, "unlabelled": 0}
    item = json.loads((tmp_path / "store" / "items.jsonl").read_text())
    assert item["system"] == "mascot@0.6" and item["meta"]["emotion"] == "sad"
    (tmp_path / "bad.jsonl").write_text(json.dumps({"id": "zz", "annotator": "L1", "acceptability": "borderline"}) + "\n")
    with pytest.raises(ConfigError, match="name no sampled reply"):
        to_store_files([tmp_path / "replies.jsonl"], [tmp_path / "bad.jsonl"], tmp_path / "store2")
    export = {**item, "annotator": "L1", "acceptability": "borderline", "persona_fit": "fits", "faults": []}
    (tmp_path / "export.jsonl").write_text(json.dumps(export) + "\n")
    (row,) = load_labelled(tmp_path / "export.jsonl")
    assert row.label == LABELS.index("borderline") and row.fits == 1 and row.scenario == "s1"
    assert row.dialogue.emotion == "sad"


def test_compare_reports_shares_and_paired_sign_tests(tmp_path):
    from mascot.acceptability.report import compare, examples_markdown, labelled_replies

    replies, labels = [], []
    for k in range(6):
        for system, lab in (("a", "acceptable"), ("b", "not_acceptable" if k < 5 else "acceptable")):
            rid = f"{system}{k}"
            replies.append({"id": rid, "scenario": f"s{k}", "persona": "Anchor", "system": system, "reply": f"r {rid}",
                            "context": [{"speaker": "user", "text": f"opening {k}"}]})
            labels.append({"id": rid, "annotator": "L1", "acceptability": lab})
    labels.append({"id": "a0", "annotator": "L2", "acceptability": "not_acceptable"})  # a second label is not counted
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replies))
    (tmp_path / "l.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    rows = labelled_replies([tmp_path / "r.jsonl"], [tmp_path / "l.jsonl"])
    report = compare(rows)
    assert report["systems"]["a"]["acceptable"]["count"] == 6 and report["systems"]["b"]["acceptable"]["share"] == 0.167
    test = report["sign_tests"]["a vs b"]
    assert (test["wins"], test["losses"], test["ties"]) == (5, 0, 1) and test["p"] == 0.0625
    md = examples_markdown(rows, "b", "a", n=2)
    assert md.count("## s") == 2 and "[N]" in md and "[A]" in md


def test_accept_shares_are_mean_percentages_and_nan_for_none():
    import math

    from mascot.acceptability.scorer import ReplyScore
    from mascot.evaluation.runner import accept_shares

    def score(acc: float, unacc: float) -> ReplyScore:
        return ReplyScore(acceptability=acc, persona_fit=0.5, faults=(), p_acceptable=acc, p_unacceptable=unacc)

    shares = accept_shares([score(0.2, 0.5), score(0.4, 0.1)])
    assert shares == {"acceptable": 30.0, "unacceptable": 30.0}
    assert all(math.isnan(v) for v in accept_shares([]).values())
