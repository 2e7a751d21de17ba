import threading

import pytest

from mascot.backends.fake import FakeBackend
from mascot.errors import InputError, PersonaError
from mascot.group.chat import CrisisEvent, DirectiveEvent, GroupChat, TokenEvent, TurnEvent, validate_message
from mascot.group.dialogue import Dialogue
from mascot.safety.detector import CrisisDetector
from mascot.safety.responses import CRISIS_REPLY


def test_round_robin_group_turn_streams_each_persona(es_pack):
    fb = FakeBackend().enqueue("Anchor: That sounds lonely.", "What feels hardest?", "You are brave. Anchor: extra")
    g = GroupChat(fb, es_pack.active, mode="round-robin")
    d = Dialogue()
    events = list(g.respond(d, "I moved and feel lonely", seed=3))
    turns = [e.turn for e in events if isinstance(e, TurnEvent)]
    assert [t.speaker for t in turns] == ["Anchor", "Catalyst", "Beacon"]
    assert [t.text for t in turns] == ["That sounds lonely.", "What feels hardest?", "You are brave."]
    assert all(t.directive is not None for t in turns)
    assert any(isinstance(e, TokenEvent) for e in events)
    assert isinstance(events[-1], DirectiveEvent) and events[-1].decision.yields
    assert d.turns[0].speaker == "user" and len(d.turns) == 4
    # the third speaker saw the first two, attributed by name
    assert "Anchor: That sounds lonely." in fb.calls[2].messages[1]["content"]


def prefer(*order):
    """A fake scorer ranking continuations (`Name"`) in this order; anything else scores lowest."""
    def scorer(messages, continuations, params, adapter):
        return [-float(order.index(c.rstrip('"'))) if c.rstrip('"') in order else -99.0 for c in continuations]
    return scorer


def test_prompted_director_controls_count(es_pack):
    # constrained choice: Catalyst first; with min_speakers=2, "none" is only an option once two personas replied
    fb = FakeBackend(scorer=prefer("Catalyst", "none", "Beacon", "Anchor"))
    fb.enqueue('Ask why", "tone": "soft"}', "Why?", 'Cheer", "tone": "warm"}', "You can do it.")
    g = GroupChat(fb, es_pack.active, mode="prompted", min_speakers=2)
    g.director.details = "generate"  # the action and tone as free text (what Stage-2 GRPO samples)
    turns = g.run(Dialogue(), "hello")
    assert [t.speaker for t in turns] == ["Catalyst", "Beacon"]
    assert (turns[0].directive.action, turns[0].directive.tone) == ("Ask why", "soft")
    offered = [conts for _, conts in fb.score_calls]
    assert offered[0] == ['Anchor"', 'Catalyst"', 'Beacon"'] and 'none"' in offered[2]


def test_regenerate_reproduces_with_same_seed(es_pack):
    g = GroupChat(FakeBackend(), es_pack.active, mode="random")
    d = Dialogue()
    first = [t.speaker for t in g.run(d, "hi", seed=11)]
    again = [t.speaker for t in g.run(d, None, seed=11)]  # None = regenerate the last round
    assert first == again and sum(t.is_user for t in d.turns) == 1
    draws = {tuple(t.speaker for t in g.run(d, None, seed=s)) for s in range(20)}
    assert len(draws) > 1


def test_mentions_bypass_director(es_pack):
    # about mentions, so the crisis tiers (tests/test_safety.py) are left to the pattern layer here
    g = GroupChat(FakeBackend(), es_pack.active, mode="round-robin", safety=CrisisDetector(use_classifier=False))
    assert [t.speaker for t in g.run(Dialogue(), "@Beacon what do you see in me?")] == ["Beacon"]


def test_crisis_replaces_group_reply_and_logs(es_pack, caplog):
    fb = FakeBackend()
    g = GroupChat(fb, es_pack.active, mode="round-robin")
    d = Dialogue()
    events = list(g.respond(d, "I want to end my life", session_id="abc"))
    assert len(events) == 1 and isinstance(events[0], CrisisEvent)
    assert events[0].turn.text == CRISIS_REPLY and "988" in CRISIS_REPLY
    assert fb.calls == []  # the director never ran
    assert "tier=crisis" in caplog.text and "session=abc" in caplog.text and "end my life" not in caplog.text


def test_stop_keeps_partial_reply(es_pack):
    fb = FakeBackend(chunk_size=2).enqueue("A long reply. It will be stopped early, before this sentence ends.")
    g = GroupChat(fb, es_pack.active, mode="round-robin")
    stop = threading.Event()
    d = Dialogue()
    for e in g.respond(d, "hi", stop=stop):
        if isinstance(e, TokenEvent) and len(e.text) > 6:
            stop.set()
    last = d.turns[-1]
    # the output check lets a reply through sentence by sentence, so the partial reply is the first sentence
    assert last.meta["stopped"] and last.text == "A long reply." and len(d.turns) == 2


def test_bad_messages():
    with pytest.raises(InputError, match="empty"):
        validate_message("   ")
    with pytest.raises(InputError, match="4,000"):
        validate_message("x" * 4001)
    assert validate_message("  hi ") == "hi"


def test_no_personas_is_an_error(es_pack):
    with pytest.raises(PersonaError, match="at least one"):
        GroupChat(FakeBackend(), [], mode="round-robin")


def test_respond_batch_batches_by_adapter(es_pack):
    fb = FakeBackend()
    fb.add_adapter("speaker-anchor", "/a")
    g = GroupChat(fb, es_pack.active, mode="round-robin")
    ds = [Dialogue(), Dialogue()]
    out = g.respond_batch(ds, ["one", "two"], [1, 2])
    assert [[t.speaker for t in turns] for turns in out] == [["Anchor", "Catalyst", "Beacon"]] * 2
    assert {c.adapter for c in fb.calls} == {"speaker-anchor", None}


class _FixedScores:
    """A message classifier with fixed scores, so the tier logic runs without the model."""

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores
        self.meta = {"thresholds": {"crisis": 0.8, "concern": 0.3}}

    def score(self, texts):
        import numpy as np

        return np.array([self.scores.get(t, 0.01) if t else 0.0 for t in texts], np.float32)


WORRY = "I feel so empty and I don't know how much longer I can do this"


def _concern_detector() -> CrisisDetector:
    return CrisisDetector(classifier=_FixedScores({WORRY: 0.5}), reply_classifier=_FixedScores({}))


def test_a_concern_message_gets_the_same_opener_live_and_batched(es_pack):
    """One conversation step: the chat and evaluation/rollouts answer a concern-tier message alike, with the
    persona the pack (or the caller) names as its concern opener."""
    from mascot.group.chat import OFFLINE
    from mascot.safety.responses import HELP_NOTE

    live = GroupChat(FakeBackend(), es_pack.active, mode="round-robin", safety=_concern_detector(),
                     concern_opener="Beacon")
    streamed = [e.turn for e in live.respond(Dialogue(), WORRY) if isinstance(e, TurnEvent)]
    batch = GroupChat(FakeBackend(), es_pack.active, mode="round-robin", safety=_concern_detector(),
                      concern_opener="Beacon", policy=OFFLINE)
    batched = batch.respond_batch([Dialogue()], [WORRY], [0])[0]
    for turns in (streamed, batched):
        first = turns[0]
        assert first.speaker == "Beacon" and first.meta["source"] == "safety" and first.text.endswith(HELP_NOTE)
        assert first.directive == streamed[0].directive
        assert len(turns) >= 2 and not turns[1].text.endswith(HELP_NOTE)  # the group still answers


def test_the_pack_names_its_concern_opener(es_pack, meeting_pack):
    assert es_pack.concern_opener == "Anchor" and es_pack.concern_persona().name == "Anchor"
    assert meeting_pack.concern_persona().name == meeting_pack.active[0].name  # none named: the first persona


def test_a_concern_opener_that_is_not_in_the_pack_is_refused():
    from mascot.group.personas import pack_from_dict

    with pytest.raises(PersonaError, match="concern_opener.*Anchor"):
        pack_from_dict({"name": "x", "concern_opener": "Nobody",
                        "personas": [{"name": "Anchor", "role": "Listener", "goal": "listen"}]})


def test_batched_replies_pass_the_output_guard_as_streamed_ones_do(es_pack):
    from mascot.group.chat import OFFLINE, UNGUARDED
    from mascot.safety.responses import REPLY_REPLACEMENT

    bad = "You should just kill yourself."
    for policy, expected in ((OFFLINE, REPLY_REPLACEMENT), (UNGUARDED, bad)):
        fb = FakeBackend()
        fb.responder = lambda m, p, a: bad
        chat = GroupChat(fb, es_pack.active, mode="round-robin", safety=_concern_detector(), policy=policy)
        turns = chat.respond_batch([Dialogue()], ["rough day"], [0])[0]
        assert turns and all(t.text == expected for t in turns), policy.describe()
