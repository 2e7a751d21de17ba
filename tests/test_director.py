import pytest

from mascot.backends.fake import FakeBackend
from mascot.errors import ConfigError, DirectorParseError
from mascot.group.dialogue import USER, Dialogue, Turn
from mascot.group.director import DirectorState, LLMDirector, find_mentions, make_director, parse_directive


def state(pack, turns=(), seed=1, forced=()):
    d = Dialogue([Turn(s, t) for s, t in turns])
    return DirectorState(d, pack.active, seed, list(forced))


def test_parse_json_lines_and_bare_name(es_pack):
    r = es_pack.active
    d = parse_directive('{"speaker": "Catalyst", "action": "Ask why", "tone": "curious"}', r)
    assert (d.speaker, d.action, d.tone) == ("Catalyst", "Ask why", "curious")
    d = parse_directive("Agent: The Anchor\nAction: Validate guilt.\nTone: Calm", r)
    assert (d.speaker, d.action, d.tone) == ("Anchor", "Validate guilt.", "Calm")
    d = parse_directive("Beacon", r)
    assert d.speaker == "Beacon" and d.action  # defaults filled from the persona
    assert parse_directive('{"speaker": "none"}', r) is None
    assert parse_directive('{"speaker": "USER"}', r) is None
    assert parse_directive('{"speaker": "Anchor", "action": "Vali', r).speaker == "Anchor"  # truncated JSON


@pytest.mark.parametrize("raw", ["", '{"speaker": "Action Guide"}', '{"speaker": "You"}', "blah blah"])
def test_parse_rejects_off_roster(es_pack, raw):
    with pytest.raises(DirectorParseError):
        parse_directive(raw, es_pack.active)  # Action Guide is off by default


def test_llm_director_invalid_output_falls_back_deterministically(es_pack):
    fb = FakeBackend().enqueue('You", "action": "You"}')
    dec = LLMDirector(fb).decide(state(es_pack, [(USER, "hi")]))
    assert dec.source == "fallback" and dec.directive.speaker == "Anchor" and "unusable" in dec.note
    fb.enqueue('none"}')  # yielding before anyone spoke is invalid too
    dec = LLMDirector(fb).decide(state(es_pack, [(USER, "hi")]))
    assert dec.source == "fallback" and dec.directive.speaker == "Anchor"


def test_llm_director_valid_and_no_repeat(es_pack):
    fb = FakeBackend().enqueue('Catalyst", "action": "Ask", "tone": "warm"}')
    dec = LLMDirector(fb).decide(state(es_pack, [(USER, "hi")]))
    assert (dec.source, dec.directive.speaker, dec.directive.action) == ("prompted", "Catalyst", "Ask")
    assert fb.calls[0].params.prefill.startswith('{"speaker"')
    fb.enqueue('Catalyst"}')  # Catalyst just spoke: repeat is refused, next unspoken persona instead
    dec = LLMDirector(fb).decide(state(es_pack, [(USER, "hi"), ("Catalyst", "q?")]))
    assert dec.source == "fallback" and dec.directive.speaker == "Anchor"
    fb.enqueue('none"}')
    dec = LLMDirector(fb).decide(state(es_pack, [(USER, "hi"), ("Catalyst", "q?")]))
    assert dec.yields and dec.source == "prompted"


def test_bounds_stop_after_max_speakers(es_pack):
    d = make_director("round-robin", max_speakers=2)
    dec = d.decide(state(es_pack, [(USER, "hi"), ("Anchor", "a"), ("Catalyst", "b")]))
    assert dec.yields and dec.source == "bounds"


def test_round_robin_continues_cycle_across_turns(es_pack):
    d = make_director("round-robin", max_speakers=1)
    assert d.decide(state(es_pack, [(USER, "hi")])).directive.speaker == "Anchor"
    s = state(es_pack, [(USER, "hi"), ("Anchor", "a"), (USER, "more")])
    assert d.decide(s).directive.speaker == "Catalyst"


def test_random_mode_is_seeded_and_varies(es_pack):
    d = make_director("random", max_speakers=3)
    picks = {d.decide(state(es_pack, [(USER, "hi")], seed=s)).directive.speaker for s in range(30)}
    assert len(picks) > 1
    assert d.decide(state(es_pack, [(USER, "hi")], seed=5)) == d.decide(state(es_pack, [(USER, "hi")], seed=5))


def test_manual_and_mentions(es_pack):
    d = make_director("manual")
    dec = d.decide(state(es_pack, [(USER, "hi")], forced=["Beacon"]))
    assert dec.directive.speaker == "Beacon" and dec.source == "mention"
    assert d.decide(state(es_pack, [(USER, "hi"), ("Beacon", "x")], forced=["Beacon"])).yields
    assert find_mentions("hey @catalyst and @Beacon, thoughts?", es_pack.active) == ["Catalyst", "Beacon"]
    assert find_mentions("email me @ home", es_pack.active) == []


def test_unknown_mode_lists_valid():
    with pytest.raises(ConfigError, match="round-robin"):
        make_director("chaos")


def test_trained_mode_without_adapter_falls_back_to_prompted(caplog):
    d = make_director("trained", FakeBackend())
    assert d.mode == "prompted" and "No trained director adapter" in caplog.text
    fb = FakeBackend()
    fb.add_adapter("director", "/x")
    assert make_director("trained", fb).mode == "trained"
