"""The constrained director (valid directive every time, no repeats, at least two voices), N-turn rollouts
through GroupChat on the fake backend, and the Stage-2 directive reading/rewards."""

from __future__ import annotations

import json

import pytest

from mascot.backends.base import GenerationParams
from mascot.backends.fake import FakeBackend
from mascot.errors import BackendError
from mascot.group.chat import GroupChat
from mascot.group.dialogue import USER, Dialogue, Directive, Turn
from mascot.group.director import Decision, Director, DirectorState, LLMDirector, make_director
from mascot.group.rollouts import Rollout, roll_forward
from mascot.simusers import ReplaySimUser, SeekerScript
from mascot.train.stage2.rewards import read_directive
from tests.test_chat import prefer


def st(pack, turns, seed=1):
    return DirectorState(Dialogue([Turn(s, t) for s, t in turns]), pack.active, seed)


def test_constrained_choice_offers_only_allowed_speakers(es_pack):
    fb = FakeBackend(scorer=prefer("Anchor", "Catalyst", "Beacon", "none"))
    d = make_director("prompted", fb)
    dec = d.decide(st(es_pack, [(USER, "hi"), ("Anchor", "I hear you.")]))
    # Anchor already spoke: it is not even offered; "none" is not offered before two replies
    speaker_calls = [c for c in fb.score_calls if c[0].params.prefill == '{"speaker": "']
    assert len(speaker_calls) == 1 and speaker_calls[0][1] == ['Catalyst"', 'Beacon"']
    assert dec.directive.speaker == "Catalyst" and dec.source == "prompted"


def test_action_and_tone_are_chosen_from_the_persona_menu(es_pack):
    """`choose`: after the speaker, the model scores the persona's actions, then its tones after that action;
    the directive carries the best of each (mean log-probability per token), with no generation."""
    catalyst = es_pack.get("Catalyst")
    want_action, want_tone = catalyst.action_options()[2], catalyst.tone_options()[1]

    def scorer(messages, conts, params, adapter):
        if params.prefill == '{"speaker": "':
            return [0.0 if c.startswith("Catalyst") else -9.0 for c in conts]
        if params.prefill.endswith('"action": "'):
            return [-0.1 if c.startswith(want_action) else -4.0 for c in conts]
        assert params.prefill.endswith(f'{want_action}", "tone": "'), params.prefill  # the tone follows the chosen action
        return [-0.1 if c.startswith(want_tone) else -4.0 for c in conts]

    fb = FakeBackend(scorer=scorer)
    dec = make_director("prompted", fb).decide(st(es_pack, [(USER, "hi")]))
    assert (dec.directive.speaker, dec.directive.action, dec.directive.tone) == ("Catalyst", want_action, want_tone)
    assert fb.calls == [] and len(fb.score_calls) == 3
    from mascot.group.director import distinct_openings

    assert [c[1] for c in fb.score_calls[1:]] == [distinct_openings(catalyst.action_options()),
                                                  [t + '"}' for t in catalyst.tone_options()]]  # short: whole
    assert json.loads(dec.raw)["action"] == want_action


def test_distinct_openings_cut_options_where_they_differ():
    from mascot.group.director import distinct_openings

    opts = ["Ask what the user feels now.", "Ask what the user needs.", "Name a strength.", "Be calm"]
    assert distinct_openings(opts, 3) == ["Ask what the user feels", "Ask what the user needs.", "Name a strength.", "Be calm"]


def test_valid_directive_every_time_whatever_the_scores(es_pack):
    import random

    rng = random.Random(0)
    fb = FakeBackend(scorer=lambda m, c, p, a: [rng.uniform(-5, 0) for _ in c])
    fb.responder = lambda m, p, a: "garbage without quotes"  # undecodable action/tone text
    director = make_director("prompted", fb)
    for k in range(30):
        turns = [(USER, "hello")] + [(n, "x") for n in ("Anchor", "Beacon", "Catalyst")[: k % 3]]
        dec = director.decide(st(es_pack, turns, seed=k))
        spoken = {s for s, _ in turns[1:]}
        assert dec.source != "fallback", dec.note
        if dec.directive is not None:
            assert dec.directive.speaker not in spoken and dec.directive.speaker in {p.name for p in es_pack.active}
            assert dec.directive.action and dec.directive.tone  # persona defaults fill undecodable text
        else:
            assert len(spoken) >= 2


class NoScoreBackend(FakeBackend):
    def score(self, messages, continuations, params, adapter=None):
        raise BackendError("cannot score")


def test_backend_without_scoring_falls_back_to_generate_and_validate(es_pack, caplog):
    fb = NoScoreBackend().enqueue('Beacon", "action": "Cheer", "tone": "warm"}')
    director = make_director("prompted", fb)
    dec = director.decide(st(es_pack, [(USER, "hi")]))
    assert dec.directive.speaker == "Beacon" and "generate-and-validate" in caplog.text
    assert NoScoreBackend().adapters == {} and not director.constrained


def test_switched_off_persona_is_never_chosen(es_pack):
    es_pack.get("Catalyst").enabled = False
    fb = FakeBackend(scorer=prefer("Catalyst", "Beacon", "Anchor"))
    dec = make_director("prompted", fb).decide(DirectorState(Dialogue([Turn(USER, "hi")]), es_pack.active, 0))
    assert dec.directive.speaker == "Beacon"
    # the free-generation path names the switched-off persona: logged fallback, never a crash
    free = LLMDirector(FakeBackend().enqueue('Catalyst", "action": "x", "tone": "y"}'))
    dec = free.decide(DirectorState(Dialogue([Turn(USER, "hi")]), es_pack.active, 0))
    assert dec.source == "fallback" and dec.directive.speaker == "Anchor"


def test_base_backend_score_raises():
    from mascot.backends.base import Backend

    class Minimal(Backend):
        def generate(self, batch, params, adapter=None):
            return []

        def info(self):
            return None

    with pytest.raises(BackendError, match="cannot score"):
        Minimal().score([], ["a"], GenerationParams())


def test_trained_chat_answers_with_every_voice_and_honours_bounds_and_mentions(es_pack):
    from mascot.safety.detector import CrisisDetector

    fb = FakeBackend(scorer=prefer("none", "Beacon", "Anchor", "Catalyst"))
    fb.add_adapter("director", "/tmp/director")
    # about the director, so the crisis tiers are left to the pattern layer (tests/test_safety.py covers them)
    g = GroupChat(fb, es_pack.active, mode="trained", safety=CrisisDetector(use_classifier=False))
    assert g.director.mode == "trained"
    turns = g.run(Dialogue(), "I failed my driving test.")
    # wants to yield at once, but every active persona answers first (LLM_MIN_SPEAKERS = 3), in its order
    assert [t.speaker for t in turns] == ["Beacon", "Anchor", "Catalyst"]
    two = GroupChat(fb, es_pack.active, mode="trained", min_speakers=2, safety=g.safety)
    assert [t.speaker for t in two.run(Dialogue(), "I failed my driving test.")] == ["Beacon", "Anchor"]
    assert {c[0].adapter for c in fb.score_calls} == {"director"}  # speaker, action and tone all scored by it
    one = GroupChat(fb, es_pack.active, mode="trained", max_speakers=1, safety=g.safety)
    assert len(one.run(Dialogue(), "hello")) == 1
    assert [t.speaker for t in g.run(Dialogue(), "@Catalyst what do you think?")] == ["Catalyst"]


def test_rollout_of_n_turns_through_groupchat_keyed_by_id(es_pack):
    fb = FakeBackend()
    chat = GroupChat(fb, es_pack.active, mode="round-robin", max_speakers=2)
    user = ReplaySimUser()
    a = SeekerScript("a", "sit a", ["A1", "A2", "A3"])
    b = SeekerScript("b", "sit b", ["B1"])  # ends after the opening: its user stops
    rolls = [Rollout.from_script("ra", a), Rollout.from_script("rb", b)]
    rolls[0].first = Decision(Directive("Beacon", "Cheer them on", "warm"), "sampled")
    roll_forward(chat, rolls, user, n_turns=4)
    ra, rb = rolls
    assert len(ra.new_turns) == 4
    assert [t.speaker for t in ra.new_turns] == ["Beacon", "Anchor", USER, "Catalyst"]
    assert ra.new_turns[0].directive.action == "Cheer them on" and ra.new_turns[2].text == "A2"
    assert rb.done and [t.speaker for t in rb.new_turns] == ["Anchor", "Catalyst"]
    assert rb.notes == ["script finished"]


def test_read_directive_and_format_levels(es_pack):
    rules = Director(3, False, 2)
    d = Dialogue([Turn(USER, "hi"), Turn("Anchor", "I hear you")])
    ok = read_directive('Catalyst", "action": "Ask one question", "tone": "curious"}', d, es_pack.active, rules)
    assert ok.ok and ok.strict and ok.speaker == "Catalyst"
    loose = read_directive('Catalyst", "actoin": blah', d, es_pack.active, rules)
    assert loose.ok and not loose.strict and loose.action == es_pack.get("Catalyst").default_action
    assert not read_directive('Anchor", "action": "a", "tone": "b"}', d, es_pack.active, rules).ok  # spoke already
    assert not read_directive('none"}', d, es_pack.active, rules).ok  # only one reply so far
    assert not read_directive("Bob the builder", d, es_pack.active, rules).ok
    d.add(Turn("Catalyst", "why?"))
    assert read_directive('none"}', d, es_pack.active, rules).yields
    assert json.loads('{"speaker": "' + 'none"}')  # the prefill + completion is the JSON the chat parses


def test_scoring_only_directive_uses_persona_defaults(es_pack):
    fb = FakeBackend(scorer=prefer("Beacon", "Anchor", "Catalyst"))
    director = make_director("prompted", fb)
    director.details = "default"
    dec = director.decide(st(es_pack, [(USER, "hi")]))
    beacon = es_pack.get("Beacon")
    assert (dec.directive.speaker, dec.directive.action, dec.directive.tone) == ("Beacon", beacon.default_action, beacon.default_tone)
    assert fb.calls == []  # one scoring pass, no generation


def test_transformers_score_matches_a_plain_forward(tiny_model_dir):
    """Backend.score (shared prompt KV cache, one batched forward) equals the log-probability of each
    continuation computed token by token from a plain forward pass of prompt + continuation."""
    import torch

    from mascot.backends.transformers_backend import TransformersBackend

    b = TransformersBackend(str(tiny_model_dir), dtype="float32")
    msgs = [{"role": "user", "content": "Who speaks next?"}]
    params = GenerationParams(prefill='{"speaker": "')
    conts = ['Anchor"', 'Catalyst"', 'none"']
    got = b.score(msgs, conts, params)
    prompt = b.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) + params.prefill
    n = len(b.tokenizer(prompt, add_special_tokens=False)["input_ids"])
    for c, value in zip(conts, got):
        ids = torch.tensor([b.tokenizer(prompt, add_special_tokens=False)["input_ids"]
                            + b.tokenizer(c, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            logp = torch.log_softmax(b.model(ids).logits.float(), -1)
        expected = sum(float(logp[0, i - 1, ids[0, i]]) for i in range(n, ids.shape[1]))
        assert value == pytest.approx(expected, abs=1e-3)
