"""Simulated users: a prompt per personality profile, the tau-bench/RLVER rules, replay keyed by rollout
id, and the retry-then-end handling of an empty reply."""

from __future__ import annotations

import pytest

from mascot.backends.fake import FakeBackend
from mascot.errors import ConfigError
from mascot.group.dialogue import USER, Turn
from mascot.simusers import (
    STOP_MARKER,
    LLMSimUser,
    ReplaySimUser,
    SeekerScript,
    clean_user_text,
    list_profiles,
    load_scripts,
    load_simuser,
    profile_fragment,
    simuser_messages,
)

SCRIPT = SeekerScript("x1", "Moved to a new city and knows nobody.", ["I feel alone here.", "Weekends are worst.", "Maybe a club?"],
                      emotion="lonely")


def test_profiles_are_the_papers_ten_big_five_and_sixteen_mbti() -> None:
    names = list_profiles()
    assert len([n for n in names if n.startswith("big5-")]) == 10
    assert len([n for n in names if n.startswith("mbti-")]) == 16
    assert {"big5-openness-high", "big5-neuroticism-low", "mbti-INFP", "mbti-ESTJ"} <= set(names)


@pytest.mark.parametrize("profile", list_profiles())
def test_prompt_per_profile_carries_scenario_profile_and_rules(profile: str) -> None:
    d = SCRIPT.opening_dialogue()
    d.add(Turn("Anchor", "That sounds lonely."))
    msgs = simuser_messages(SCRIPT, d, profile)
    system = msgs[0]["content"]
    assert SCRIPT.situation in system and "lonely" in system
    assert profile_fragment(profile) in system and profile_fragment(profile)
    for rule in ("1-3 short sentences", "gradually", "Stay in character", "Never act as a companion", STOP_MARKER):
        assert rule in system
    assert "You: I feel alone here." in msgs[1]["content"] and "Anchor: That sounds lonely." in msgs[1]["content"]


def test_unknown_profile_lists_valid_names() -> None:
    with pytest.raises(ConfigError, match="mbti-INTJ"):
        profile_fragment("mbti-XXXX")
    assert profile_fragment("infp") == profile_fragment("mbti-INFP")


def test_bundled_scripts_are_multi_turn_and_split() -> None:
    train, test = load_scripts("bundled", "train"), load_scripts("bundled", "test")
    assert len(train) + len(test) >= 60 and len(test) >= 20
    assert all(len(s.turns) >= 3 for s in train + test)
    assert not {s.id for s in train} & {s.id for s in test}
    assert len(load_scripts("esconv", "all")) >= 10  # the bundled ESConv sample's seeker turns


def test_replay_is_keyed_by_rollout_id_not_position() -> None:
    user = ReplaySimUser()
    other = SeekerScript("x2", "s", ["A1", "A2", "A3"])
    user.start("r-a", SCRIPT)
    user.start("r-b", other)
    da, db = SCRIPT.opening_dialogue(), other.opening_dialogue()
    # r-a ends first; r-b must still get its own next turn when asked alone
    assert [t.text for t in user.reply_batch(["r-a", "r-b"], [da, db])] == ["Weekends are worst.", "A2"]
    db.add(Turn(USER, "A2"))
    assert user.reply_batch(["r-b"], [db])[0].text == "A3"
    db.add(Turn(USER, "A3"))
    end = user.reply_batch(["r-b"], [db])[0]
    assert end.done and end.text == ""
    with pytest.raises(ConfigError, match="never started"):
        user.reply_batch(["r-z"], [db])


def test_clean_user_text_rules() -> None:
    assert clean_user_text("You: Thanks, that helps. [END]") == ("Thanks, that helps.", True)
    text, done = clean_user_text("One. Two! Three? Four. Five.")
    assert text == "One. Two! Three?" and not done
    assert clean_user_text("I guess so.\nAnchor: I hear you.", ["Anchor"])[0] == "I guess so."


def test_llm_user_retries_an_empty_reply_then_ends_the_dialogue() -> None:
    fake = FakeBackend().enqueue("", "Okay, it's been hard. [END]", "", "")
    user = load_simuser("llm", fake, profile="mbti-ISTJ", companions=["Anchor"])
    assert isinstance(user, LLMSimUser)
    user.start("a", SCRIPT)
    first = user.reply_batch(["a"], [SCRIPT.opening_dialogue()])[0]
    assert first.text == "Okay, it's been hard." and first.done  # the retry answered, with the stop marker
    assert "ISTJ" in fake.calls[0].messages[0]["content"]
    ended = user.reply_batch(["a"], [SCRIPT.opening_dialogue()])[0]
    assert ended.done and ended.text == "" and "empty" in ended.note


def test_llm_user_needs_a_backend() -> None:
    with pytest.raises(ConfigError):
        load_simuser("llm")
    with pytest.raises(ConfigError, match="replay"):
        load_simuser("nope")

