"""Reward functions on literals: the format reward's checks, the group z-score, the registry contract."""

from __future__ import annotations

import math

import pytest

from mascot.errors import ConfigError
from mascot.group.personas import PersonaPack
from mascot.rewards import REWARDS, RewardContext, get_reward_funcs, group_zscore, make_persona_rm_reward, rm_prompt
from mascot.rewards.format import FormatChecker, completion_text, make_format_reward

NAMES = ["Anchor", "Catalyst", "Beacon"]


@pytest.fixture
def fmt():
    return make_format_reward(NAMES, min_words=5, max_words=30, aliases={"Catalyst": ["Cathy", "Analyst"]})


def conv(text: str) -> list[dict[str, str]]:
    """TRL's conversational completion format."""
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize(
    "text, ok, problem",
    [
        ("That sounds really lonely, and it makes sense the evenings feel heavy.", True, None),
        ("Moving to a new city on your own shows real courage. 🌈", True, None),
        ("Anchor: That sounds really lonely and it makes sense.", False, "speaker tag"),
        ("That sounds hard. Catalyst: what would you tell a friend?", False, "speaker tag"),
        ("I hear you, it is hard. **Cathy:** what part is hardest?", False, "speaker tag"),
        ("User: thanks, that helps me a lot today.", False, "speaker tag"),
        ("As an AI, I cannot feel it, but that sounds hard.", False, "meta-talk"),
        ("<think>be kind</think> That sounds really hard for you.", False, "meta-talk"),
        ("(sighing) Ah, that sounds like a really lonely stretch for you.", False, "stage direction"),
        ("That sounds lonely. (Reflective pause) What part of the evening is hardest?", False, "stage direction"),
        ("Talking to someone (a friend, or a counsellor) could ease the evenings a little.", True, None),
        ("That sounds hard.\nWhat part of the evening is hardest?", False, "several lines"),
        ("It sounds like the evenings have been really", False, "unfinished"),
        ("So sorry.", False, "too short"),
        (" ".join(["word"] * 40) + ".", False, "too long"),
        ("", False, "empty"),
    ],
)
def test_format_checker_literals(text: str, ok: bool, problem: str | None) -> None:
    result = FormatChecker(NAMES, 5, 30, {"Catalyst": ["Cathy"]})(text, "Anchor")
    assert result.ok is ok, result.problems
    if problem:
        assert problem in result.problems


def test_format_reward_contract(fmt) -> None:
    completions = [conv("That sounds really lonely, and it makes sense the evenings feel heavy."),
                   conv("Beacon: you are so brave for trying again today."), "plain text works too, it is fine."]
    assert fmt(completions, persona=["Anchor", "Anchor", "Anchor"]) == [1.0, 0.0, 1.0]
    assert fmt.__name__ == "format_reward"
    assert completion_text(conv("a") + conv("b")) == "ab"


def test_group_zscore_normalises_within_groups() -> None:
    z = group_zscore([1.0, 2.0, 3.0, 10.0, 10.0, 0.5], ["a", "a", "a", "b", "b", "c"])
    assert z[0] == pytest.approx(-math.sqrt(1.5)) and z[1] == pytest.approx(0.0) and z[2] == pytest.approx(math.sqrt(1.5))
    assert z[3:5] == [0.0, 0.0]  # no spread -> no signal
    assert z[5] == 0.0  # a group of one
    assert sum(z[:3]) == pytest.approx(0.0)


def test_group_zscore_keeps_nan_out_of_the_statistics() -> None:
    z = group_zscore([1.0, math.nan, 3.0], ["g", "g", "g"])
    assert math.isnan(z[1]) and z[0] == pytest.approx(-1.0) and z[2] == pytest.approx(1.0)


class _FakeRM:
    """Scores by length, so the composite reward's arithmetic is checkable by hand."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def score_texts(self, prompts, responses):
        self.seen += list(zip(prompts, responses))
        return [float(len(r.split())) for r in responses]


def test_persona_rm_reward_z_scores_per_prompt_and_cleans(es_pack: PersonaPack) -> None:
    rm = _FakeRM()
    f = make_persona_rm_reward(rm, es_pack.active, es_pack.active)  # type: ignore[arg-type]
    logged: dict[str, float] = {}
    out = f([conv("one two"), conv("Anchor: one two three four"), conv("x"), conv("x y z")],
            rm_prompt=["p1", "p1", "p2", "p2"], persona=["Anchor"] * 4, log_metric=logged.__setitem__)
    assert out == pytest.approx([-1.0, 1.0, -1.0, 1.0])
    assert rm.seen[1][1] == "one two three four."  # the chat's clean_reply strips the own-name tag and finishes the sentence
    assert logged["persona_rm/raw_mean"] == pytest.approx((2 + 4 + 1 + 3) / 4)
    assert f.__name__ == "persona_rm"


def test_composite_reward_matches_paper_weights(es_pack: PersonaPack) -> None:
    """R = z(r_phi) + 0.5 * r_fmt, the sum TRL forms with reward_weights=[1.0, 0.5]."""
    ctx = RewardContext(personas=es_pack.active, roster=es_pack.active, min_words=3, max_words=30, reward_model=_FakeRM())  # type: ignore[arg-type]
    rm_f, fmt_f = get_reward_funcs(["persona_rm", "format"], ctx)
    completions = [conv("I hear you, that is heavy."), conv("Catalyst: so what now friend?")]
    kw = {"rm_prompt": ["p", "p"], "persona": ["Anchor", "Anchor"]}
    total = [a + 0.5 * b for a, b in zip(rm_f(completions, **kw), fmt_f(completions, **kw))]
    assert total == pytest.approx([1.0 + 0.5, -1.0 + 0.0])


def test_registry_names_and_errors(es_pack: PersonaPack) -> None:
    assert set(REWARDS) == {"persona_rm", "format", "judge", "relevance", "consistency", "balanced", "mood", "overlong", "acceptability"}
    ctx = RewardContext(personas=es_pack.active, roster=es_pack.active)
    with pytest.raises(ConfigError, match="Valid reward names"):
        get_reward_funcs(["nope"], ctx)
    with pytest.raises(ConfigError, match="reward model"):
        get_reward_funcs(["persona_rm"], ctx)
    with pytest.raises(ConfigError, match="judge"):
        get_reward_funcs(["judge"], ctx)
    with pytest.raises(ConfigError, match="'relevance' reward needs a judge"):
        get_reward_funcs(["relevance"], ctx)
    with pytest.raises(ConfigError, match="token budget"):
        get_reward_funcs(["overlong"], ctx)


def test_rm_prompt_layout(es_pack: PersonaPack) -> None:
    from mascot.group.dialogue import Dialogue, Turn

    anchor = es_pack.get("Anchor")
    d = Dialogue([Turn("user", "I failed my test.")], situation="Driving test")
    text = rm_prompt(anchor, d)
    assert text.startswith("Persona: Anchor (Listener)") and "User: I failed my test." in text
    assert text.endswith("Next message from Anchor:\n") and "Situation: Driving test" in text
    assert rm_prompt("", "User: hi").endswith("Next message from the group:\n")


def test_judge_reward_is_z_scored_per_group_and_skips_invalid(es_pack: PersonaPack) -> None:
    import json as _json

    from mascot.group.dialogue import Dialogue, Turn
    from mascot.judges.base import CRITERIA, Verdict

    class _Judge:
        def score_batch(self, items):  # aggregate = number of words, capped at 5; "bad" -> invalid
            return [Verdict.invalid("x") if it.response.rstrip(".") == "bad" else
                    Verdict({k: float(min(5, len(it.response.split()))) for k in CRITERIA}, True) for it in items]

    ctx = RewardContext(personas=es_pack.active, roster=es_pack.active, judge=_Judge())
    (f,) = get_reward_funcs(["judge"], ctx)
    c1 = _json.dumps(Dialogue([Turn("user", "hi")]).to_dict())
    c2 = _json.dumps(Dialogue([Turn("user", "hello")]).to_dict())
    logged: dict[str, float] = {}
    out = f([conv("a b"), conv("a b c d"), conv("bad"), conv("x"), conv("x y z")],
            persona=["Anchor"] * 5, context=[c1, c1, c1, c2, c2], log_metric=logged.__setitem__)
    assert out[:2] == pytest.approx([-1.0, 1.0]) and out[2] is None and out[3:] == pytest.approx([-1.0, 1.0])
    assert logged["judge/raw_mean"] == pytest.approx((2 + 4 + 1 + 3) / 4) and f.__name__ == "judge_reward"
    # the relevance reward reads one criterion only: here relevance is the aggregate's opposite
    relevant = _Judge()
    relevant.score_batch = lambda items: [Verdict({**{k: 3.0 for k in CRITERIA}, "relevance": 6.0 - min(5, len(it.response.split()))}, True)
                                          for it in items]
    (g,) = get_reward_funcs(["relevance"], RewardContext(personas=es_pack.active, roster=es_pack.active, judge=relevant))
    logged.clear()
    out = g([conv("a b"), conv("a b c d")], persona=["Anchor"] * 2, context=[c1, c1], log_metric=logged.__setitem__)
    assert out == pytest.approx([1.0, -1.0]) and logged["relevance/raw_mean"] == pytest.approx(3.0)
    assert g.__name__ == "relevance_reward"
    # and the consistency reward its own criterion: here consistency grows with the word count
    consistent = _Judge()
    consistent.score_batch = lambda items: [Verdict({**{k: 3.0 for k in CRITERIA}, "consistency": float(min(5, len(it.response.split())))}, True)
                                            for it in items]
    (h,) = get_reward_funcs(["consistency"], RewardContext(personas=es_pack.active, roster=es_pack.active, judge=consistent))
    logged.clear()
    out = h([conv("a b"), conv("a b c d")], persona=["Anchor"] * 2, context=[c1, c1], log_metric=logged.__setitem__)
    assert out == pytest.approx([-1.0, 1.0]) and logged["consistency/raw_mean"] == pytest.approx(3.0)
    assert h.__name__ == "consistency_reward"
    # the balanced reward: the lower of the two group z-scores, so a reply cannot buy one criterion with the other
    both = _Judge()
    both.score_batch = lambda items: [Verdict({**{k: 3.0 for k in CRITERIA}, "relevance": {"a": 1.0, "b": 5.0, "c": 4.0}[it.response[0]],
                                               "consistency": {"a": 5.0, "b": 1.0, "c": 4.0}[it.response[0]]}, True)
                                      for it in items]
    (b,) = get_reward_funcs(["balanced"], RewardContext(personas=es_pack.active, roster=es_pack.active, judge=both))
    logged.clear()
    out = b([conv("a x"), conv("b x"), conv("c x")], persona=["Anchor"] * 3, context=[c1] * 3, log_metric=logged.__setitem__)
    rel_z, con_z = [-1.3728, 0.9806, 0.3922], [0.9806, -1.3728, 0.3922]  # population z-scores of (1, 5, 4) and (5, 1, 4)
    assert out == pytest.approx([min(r, c) for r, c in zip(rel_z, con_z)], abs=1e-3)
    assert out.index(max(out)) == 2  # the reply good on both ranks first, not either one-sided reply
    assert logged == pytest.approx({"balanced/relevance_raw_mean": 10 / 3, "balanced/consistency_raw_mean": 10 / 3})
    assert b.__name__ == "balanced_reward"
    # a verdict without one of the criteria gives None wherever that reply sits in the batch
    partial = _Judge()
    partial.score_batch = lambda items: [Verdict({k: 3.0 for k in CRITERIA if not (k == "consistency" and it.response[0] == "a")}, True)
                                         for it in items]
    (b,) = get_reward_funcs(["balanced"], RewardContext(personas=es_pack.active, roster=es_pack.active, judge=partial))
    assert b([conv("a x"), conv("b x")], persona=["Anchor"] * 2, context=[c1] * 2)[0] is None
    assert b([conv("b x"), conv("a x")], persona=["Anchor"] * 2, context=[c1] * 2)[1] is None


def test_mood_reward_penalises_celebrating_distress_only(es_pack: PersonaPack) -> None:
    """-1 for cheering a negative-labelled (or distress-worded) message, 0 otherwise."""
    import json as _json

    from mascot.group.dialogue import Dialogue, Turn

    (f,) = get_reward_funcs(["mood"], RewardContext(personas=es_pack.active, roster=es_pack.active))
    anxious = _json.dumps(Dialogue([Turn("user", "I started a new job and I feel out of my depth.")], emotion="anxious").to_dict())
    proud = _json.dumps(Dialogue([Turn("user", "I passed my exam after failing it twice!")], emotion="proud").to_dict())
    unlabeled = _json.dumps(Dialogue([Turn("user", "My dog died yesterday.")]).to_dict())
    cheer, kind = conv("How exciting! What a wonderful step for you."), conv("That sounds like a lot to carry right now.")
    out = f([cheer, kind, cheer, cheer], persona=["Anchor"] * 4, context=[anxious, anxious, proud, unlabeled])
    assert out == [-1.0, 0.0, 0.0, -1.0] and f.__name__ == "mood_reward"


def test_trim_to_sentence_finishes_cut_off_targets() -> None:
    from mascot.rewards.format import is_finished, trim_to_sentence

    assert trim_to_sentence("That sounds really hard for you. It makes sense that you feel") == "That sounds really hard for you."
    assert trim_to_sentence("Short. And then the") == "Short. And then the"  # too little would be left
    assert trim_to_sentence("You did it! 🌈") == "You did it! 🌈" and is_finished("You did it! 🌈")
    assert not is_finished("and then the")


def test_judge_rewards_lists_every_reward_that_reads_the_judge(es_pack: PersonaPack) -> None:
    """The GRPO step loads the judge when a recipe names any of JUDGE_REWARDS (a relevance-only recipe too)."""
    from mascot.rewards import JUDGE_REWARDS

    ctx = RewardContext(personas=es_pack.active, roster=es_pack.active, reward_model=_FakeRM())  # type: ignore[arg-type]
    needs = set()
    for name in REWARDS:
        try:
            get_reward_funcs([name], ctx)
        except ConfigError as exc:
            if "needs a judge" in str(exc):
                needs.add(name)
    assert needs == set(JUDGE_REWARDS)


def test_overlong_reward_is_dapo_soft_punishment_on_token_counts(es_pack: PersonaPack) -> None:
    """0 up to budget - buffer tokens, linear to -1 at the budget, on TRL's completion_ids (not words)."""
    from mascot.rewards import overlong_penalty

    ctx = RewardContext(personas=es_pack.active, roster=es_pack.active, max_completion_tokens=48, overlong_buffer=12)
    (f,) = get_reward_funcs(["overlong"], ctx)
    ids = [[7] * n for n in (10, 36, 39, 45, 48)]
    assert f(["x"] * 5, completion_ids=ids) == pytest.approx([0.0, 0.0, -0.25, -0.75, -1.0])
    assert f.__name__ == "overlong_reward"
    assert overlong_penalty(60, 48, 12) == -1.0
    with pytest.raises(ValueError, match="completion_ids"):
        f(["x"])
    with pytest.raises(ConfigError, match="overlong_buffer=48"):
        get_reward_funcs(["overlong"], RewardContext(personas=es_pack.active, roster=es_pack.active,
                                                     max_completion_tokens=48, overlong_buffer=48))


def test_cap_words_keeps_the_first_words_at_a_sentence_end() -> None:
    from mascot.rewards.format import cap_words

    long = "That sounds hard. You have carried it alone for weeks and it shows in how tired you are."
    assert cap_words(long, 6) == "That sounds hard."
    assert cap_words(long, None) == long and cap_words("Short and kind.", 6) == "Short and kind."
    # no sentence end that keeps half the words: a hard cut at the cap
    assert cap_words("I hear you and I am here with you tonight, it sounds heavy.", 8) == "I hear you and I am here with"


def test_length_capped_rewards_pay_nothing_for_words_past_the_cap(es_pack: PersonaPack) -> None:
    """score_max_words: the mood reward and the RM read only the first words, so padding a reply changes nothing."""
    import json as _json

    from mascot.group.dialogue import Dialogue, Turn

    rm = _FakeRM()
    ctx = RewardContext(personas=es_pack.active, roster=es_pack.active, reward_model=rm, score_max_words=9)  # type: ignore[arg-type]
    rm_f, mood_f = get_reward_funcs(["persona_rm", "mood"], ctx)
    anxious = _json.dumps(Dialogue([Turn("user", "I lost my job today and I feel awful.")], emotion="sad").to_dict())
    kind = "That sounds like a lot to carry right now."
    padded = kind + " How wonderful, what an exciting adventure ahead of you!"
    out = mood_f([conv(kind), conv(padded)], persona=["Anchor"] * 2, context=[anxious] * 2)
    assert out == [0.0, 0.0]  # the cheering sentence sits past the cap
    uncapped = get_reward_funcs(["mood"], RewardContext(personas=es_pack.active, roster=es_pack.active))[0]
    assert uncapped([conv(padded)], persona=["Anchor"], context=[anxious]) == [-1.0]
    rm_f([conv(padded), conv(kind)], rm_prompt=["p", "p"], persona=["Anchor"] * 2)
    assert [r for _, r in rm.seen] == [kind, kind]  # the same text, so the same reward


def test_length_controlled_judge_reward_takes_off_the_points_words_earn(es_pack: PersonaPack) -> None:
    """judge_length_control: with the slope measured on judged candidates, a judge that pays 0.5 per word
    ranks a longer reply above a shorter one only when it is better beyond its length."""
    import json as _json

    from mascot.group.dialogue import Dialogue, Turn
    from mascot.judges.base import CRITERIA, Verdict
    from mascot.rewards import length_slopes

    class _WordyJudge:  # 0.5 points per word, +1 for a reply that names the user's feeling
        def score_batch(self, items):
            return [Verdict({k: 0.5 * len(it.response.split()) + ("tired" in it.response) for k in CRITERIA}, True)
                    for it in items]

    judged = [{"persona": "Anchor", "candidates": ["a b", "a b c d", "a b c d e f"], "scores": [1.0, 2.0, 3.0],
               "criteria": [{"consistency": 1.0}, {"consistency": 1.0}, {"consistency": 1.0}]}]
    slopes = length_slopes(judged, ["aggregate", "consistency"])
    assert slopes == {("Anchor", "aggregate"): 0.5, ("Anchor", "consistency"): 0.0}
    ctx = RewardContext(personas=es_pack.active, roster=es_pack.active, judge=_WordyJudge(), judge_length_slopes=slopes)
    (f,) = get_reward_funcs(["judge"], ctx)
    c1 = _json.dumps(Dialogue([Turn("user", "I am so tired")]).to_dict())
    short, padded, better = conv("You sound tired."), conv("You sound like it has been a very long week."), conv("You sound so very tired.")
    out = f([short, padded, better], persona=["Anchor"] * 3, context=[c1] * 3)
    assert out[1] < out[0] == pytest.approx(out[2])  # padding without the feeling loses; extra words alone earn nothing
    plain = get_reward_funcs(["judge"], RewardContext(personas=es_pack.active, roster=es_pack.active, judge=_WordyJudge()))[0]
    assert plain([short, padded], persona=["Anchor"] * 2, context=[c1] * 2)[1] > 0  # without control, length wins


def test_length_controlled_persona_rm_reward(es_pack: PersonaPack) -> None:
    """rm_length_slopes: an RM that pays one point per word, with its slope (1.0) taken off, ranks replies by
    what they say, not by how long they are; other personas' replies are left as they are."""
    from mascot.rewards import mean_words

    ctx = RewardContext(personas=es_pack.active, roster=es_pack.active, reward_model=_FakeRM(),  # type: ignore[arg-type]
                        rm_length_slopes={"Anchor": (1.0, 3.0)})
    (f,) = get_reward_funcs(["persona_rm"], ctx)
    out = f([conv("Short one."), conv("A much longer reply than that.")], rm_prompt=["p", "p"], persona=["Anchor"] * 2)
    assert out == pytest.approx([0.0, 0.0])
    out = f([conv("Short one."), conv("A much longer reply than that.")], rm_prompt=["q", "q"], persona=["Beacon"] * 2)
    assert out == pytest.approx([-1.0, 1.0])
    assert mean_words([{"persona": "A", "candidates": ["a b", "a b c d"]}]) == {"A": 3.0}
