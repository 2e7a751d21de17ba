"""Judges: registry, rubric parsing, the offline judge's signals and persona separation, and the LLM
judge against a fake OpenAI-compatible server on 127.0.0.1 (retries, invalid answers, disk cache)."""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mascot.errors import ConfigError
from mascot.group.dialogue import Dialogue, Turn
from mascot.judges import CRITERIA, JudgeItem, Verdict, load_judge
from mascot.judges.rubric import parse_verdict, rubric_messages

USER_TEXT = "I failed my driving test for the second time and I feel like an idiot."


def ctx(*persona_turns: tuple[str, str]) -> Dialogue:
    d = Dialogue([Turn("user", USER_TEXT)], situation="I failed my driving test again.", emotion="embarrassed")
    for name, text in persona_turns:
        d.add(Turn(name, text))
    return d


# ----------------------------------------------------------------------------- interface
def test_registry_fails_loudly() -> None:
    with pytest.raises(ConfigError, match="Valid judge names: llm, offline"):
        load_judge("gpt")


def test_verdict_aggregate_is_unweighted_mean() -> None:
    v = Verdict({"emotion": 1, "empathy": 2, "consistency": 3, "relevance": 4, "contribution": 5}, True)
    assert v.aggregate == 3.0
    assert math.isnan(Verdict.invalid("x").aggregate)


@pytest.mark.parametrize(
    "raw, valid",
    [
        ('{"emotion": 4, "empathy": 5, "consistency": 3, "relevance": 4, "contribution": 2}', True),
        ('Sure!\n```json\n{"Emotional expressiveness": 4, "Empathetic support quality": 5, "Persona consistency": 3, '
         '"Relevance": 4, "Social contribution": "2"}\n```', True),
        ('{"scores": {"emotion": 4.0, "empathy": 5, "consistency": 3, "relevance": 4, "contribution": 2}}', True),
        ('{"emotion": 4, "empathy": 5, "consistency": 3, "relevance": 4}', False),  # a criterion missing
        ('{"emotion": 9, "empathy": 5, "consistency": 3, "relevance": 4, "contribution": 2}', False),  # out of range
        ('{"emotion": 3.5, "empathy": 5, "consistency": 3, "relevance": 4, "contribution": 2}', False),  # not an integer
        ("I think it is a good reply, 4/5.", False),
        ('{"emotion": 4, "empathy": ', False),
    ],
)
def test_parse_verdict(raw: str, valid: bool) -> None:
    v = parse_verdict(raw)
    assert v.valid is valid
    assert v.raw == raw
    if valid:
        assert set(v.scores or {}) == set(CRITERIA) and v.scores["empathy"] == 5.0
    else:
        assert v.scores is None and v.error


def test_rubric_prompt_names_persona_roster_and_reply(es_pack) -> None:
    anchor, catalyst, beacon = es_pack.active
    msgs = rubric_messages(JudgeItem(catalyst, es_pack.active, ctx(("Anchor", "That sounds painful.")), "What went wrong?"))
    text = msgs[1]["content"]
    assert "Catalyst (Analyst)" in text and "Anchor (Listener)" in text and "Anchor: That sounds painful." in text
    assert "<<<\nWhat went wrong?\n>>>" in text and all(k in text for k in CRITERIA)


# ------------------------------------------------------------------------------- offline
@pytest.fixture(scope="module")
def offline():
    return load_judge("offline")


IN_PERSONA = {
    "Anchor": "That sounds so discouraging, and it makes sense that you feel hurt after working this hard for it.",
    "Catalyst": "What do you think went differently this time compared with your first attempt?",
    "Beacon": "You showed up again after a setback, and that persistence is a real strength. You'll get there! 🌈",
}


def test_offline_separates_personas(offline, es_pack) -> None:
    """An in-persona reply scores clearly higher on Consistency as its own persona than as another."""
    roster = es_pack.active
    for persona in roster:
        reply = IN_PERSONA[persona.name]
        own = offline.score(JudgeItem(persona, roster, ctx(), reply)).scores["consistency"]
        for other in roster:
            if other.name != persona.name:
                as_other = offline.score(JudgeItem(other, roster, ctx(), reply)).scores["consistency"]
                assert own >= as_other + 1.5, (persona.name, other.name, own, as_other)


def test_offline_generic_reply_scores_low_on_consistency(offline, es_pack) -> None:
    generic = "I'm sorry to hear that. I hope things get better for you soon."
    for p in es_pack.active:
        v = offline.score(JudgeItem(p, es_pack.active, ctx(), generic))
        assert v.scores["consistency"] <= 2.0
        assert v.scores["consistency"] < offline.score(JudgeItem(p, es_pack.active, ctx(), IN_PERSONA[p.name])).scores["consistency"]


def test_offline_relevance_novelty_and_format(offline, es_pack) -> None:
    anchor, catalyst, beacon = es_pack.active
    roster = es_pack.active
    on = offline.score(JudgeItem(anchor, roster, ctx(), IN_PERSONA["Anchor"]))
    off = offline.score(JudgeItem(anchor, roster, ctx(), "The train to Hamburg leaves from platform nine at noon tomorrow."))
    assert on.scores["relevance"] > off.scores["relevance"] + 1
    # Social contribution: repeating what Anchor already said scores lower than adding a question.
    said = ("Anchor", IN_PERSONA["Anchor"])
    echo = offline.score(JudgeItem(catalyst, roster, ctx(said), IN_PERSONA["Anchor"]))
    new = offline.score(JudgeItem(catalyst, roster, ctx(said), IN_PERSONA["Catalyst"]))
    assert new.scores["contribution"] > echo.scores["contribution"] + 1
    assert json.loads(echo.raw)["novelty"] < 0.05
    # Format checks: meta-talk zeroes Consistency; a reply that speaks as another member is capped.
    meta = offline.score(JudgeItem(anchor, roster, ctx(), "As an AI, I understand that failing a test feels bad for you."))
    assert meta.scores["consistency"] == 1.0
    tagged = offline.score(JudgeItem(catalyst, roster, ctx(), "What went differently? Beacon: you are strong!"))
    assert tagged.scores["consistency"] <= 1.5 and json.loads(tagged.raw)["other_tag"] == 1.0
    short = offline.score(JudgeItem(anchor, roster, ctx(), "Ok."))
    assert max(short.scores.values()) <= 2.0
    empty = offline.score(JudgeItem(anchor, roster, ctx(), "  "))
    assert empty.valid and empty.aggregate == 1.0


def test_offline_emotion_and_empathy_signals(offline, es_pack) -> None:
    anchor = es_pack.active[0]
    warm = offline.score(JudgeItem(anchor, es_pack.active, ctx(), "Oh no, I'm so sorry. That sounds really painful, and your feelings make complete sense."))
    flat = offline.score(JudgeItem(anchor, es_pack.active, ctx(), "Driving tests have a pass rate of about fifty percent in most regions."))
    dismissive = offline.score(JudgeItem(anchor, es_pack.active, ctx(), "Just get over it, it's not a big deal, calm down."))
    assert warm.scores["emotion"] > flat.scores["emotion"] + 1
    assert warm.scores["empathy"] > flat.scores["empathy"] + 1
    assert warm.scores["empathy"] > dismissive.scores["empathy"] + 1
    for v in (warm, flat, dismissive):
        assert all(1.0 <= s <= 5.0 for s in v.scores.values())


def test_offline_judge_penalises_celebrating_a_loss(offline, es_pack) -> None:
    """Found in use: a trained Anchor met "My dog died yesterday" with "How wonderful news is that!"."""
    anchor = es_pack.active[0]
    sad = Dialogue(situation="", turns=[Turn("user", "My dog died yesterday and I can't stop crying.")])
    happy = Dialogue(situation="", turns=[Turn("user", "I got the job I wanted, I start on Monday!")])
    cheer = "How wonderful news is that! What an amazing moment for you!"
    kind = "Oh no, losing your dog is so painful. It makes sense that you can't stop crying."
    on_sad = offline.score(JudgeItem(anchor, es_pack.active, sad, cheer))
    assert json.loads(on_sad.raw)["mood_mismatch"] == 1.0
    assert json.loads(offline.score(JudgeItem(anchor, es_pack.active, happy, cheer)).raw)["mood_mismatch"] == 0.0
    # the emotion label decides first: "out of my depth" has no distress word, but the scenario is anxious
    anxious = Dialogue(situation="", emotion="anxious", turns=[Turn("user", "New job this week and I feel out of my depth.")])
    assert json.loads(offline.score(JudgeItem(anchor, es_pack.active, anxious, cheer)).raw)["mood_mismatch"] == 1.0
    proud = Dialogue(situation="", emotion="proud", turns=[Turn("user", "I passed after failing it twice!")])
    assert json.loads(offline.score(JudgeItem(anchor, es_pack.active, proud, cheer)).raw)["mood_mismatch"] == 0.0
    caring = offline.score(JudgeItem(anchor, es_pack.active, sad, kind))
    assert caring.scores["emotion"] > on_sad.scores["emotion"] + 1 and caring.scores["empathy"] > on_sad.scores["empathy"] + 1
    assert caring.aggregate > on_sad.aggregate + 1


@pytest.mark.parametrize("text", ["Here's an edited version of the text with some suggestions.",
                                  "Here is the ending of the conversation.", "The user says they feel sad."])
def test_offline_judge_treats_editing_and_transcript_talk_as_meta_talk(offline, es_pack, text) -> None:
    v = offline.score(JudgeItem(es_pack.active[0], es_pack.active, ctx(), text))
    assert v.scores["consistency"] == 1.0 and json.loads(v.raw)["meta_talk"] == 1.0


# ------------------------------------------------------------------ LLM judge, fake server
GOOD = {"emotion": 4, "empathy": 5, "consistency": 3, "relevance": 4, "contribution": 2}


class FakeOpenAI(BaseHTTPRequestHandler):
    """POST /v1/chat/completions: fails with 500 on the first call for replies containing FLAKY,
    answers prose for replies containing GARBAGE, else a JSON verdict."""

    calls: list[dict] = []
    flaky_seen: set[str] = set()

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append(body)
        prompt = body["messages"][-1]["content"]
        assert body["temperature"] == 0 and self.headers["Authorization"] == "Bearer sk-test"
        if "FLAKY" in prompt and prompt not in self.flaky_seen:
            self.flaky_seen.add(prompt)
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"overloaded")
            return
        content = "I would rate it highly!" if "GARBAGE" in prompt else json.dumps(GOOD)
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def fake_server():
    FakeOpenAI.calls, FakeOpenAI.flaky_seen = [], set()
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_llm_judge_parses_retries_records_invalid_and_caches(fake_server, tmp_path, es_pack) -> None:
    roster = es_pack.active
    items = [
        JudgeItem(roster[0], roster, ctx(), "That sounds really hard."),
        JudgeItem(roster[1], roster, ctx(), "FLAKY what went differently?"),
        JudgeItem(roster[2], roster, ctx(), "GARBAGE you are strong"),
        JudgeItem(roster[0], roster, ctx(), "That sounds really hard."),  # duplicate: asked once
    ]
    kw = dict(base_url=fake_server, model="judge-x", api_key="sk-test", cache_path=tmp_path / "cache.sqlite", backoff=0.01)
    judge = load_judge("llm", **kw)
    verdicts = judge.score_batch(items)
    assert [v.valid for v in verdicts] == [True, True, False, True]
    assert verdicts[0].scores == {k: float(v) for k, v in GOOD.items()} and verdicts[0].aggregate == 3.6
    assert verdicts[1].scores == verdicts[0].scores  # succeeded after the 500
    assert "no JSON object" in verdicts[2].error and verdicts[2].raw == "I would rate it highly!"
    assert len(FakeOpenAI.calls) == 4  # 3 unique prompts + 1 retry
    assert judge.stats["retries"] == 1 and all(c["model"] == "judge-x" for c in FakeOpenAI.calls)
    judge.close()

    # A restarted judge finds every answered verdict (the malformed one too) in the disk cache.
    again = load_judge("llm", **kw)
    verdicts2 = again.score_batch(items)
    assert len(FakeOpenAI.calls) == 4 and again.stats["cache_hits"] == 4
    assert [v.valid for v in verdicts2] == [True, True, False, True]
    assert all(v.meta.get("cached") for v in verdicts2)
    # A different judge model is a different cache key.
    other = load_judge("llm", **{**kw, "model": "judge-y"})
    other.score_batch(items[:1])
    assert len(FakeOpenAI.calls) == 5


def test_llm_judge_gives_up_without_crashing_and_does_not_cache_failures(tmp_path, es_pack, port) -> None:
    roster = es_pack.active
    judge = load_judge("llm", base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key="k",
                       cache_path=tmp_path / "c.sqlite", max_retries=2, backoff=0.01, timeout=2)
    v = judge.score(JudgeItem(roster[0], roster, ctx(), "hello"))
    assert not v.valid and "gave up after 3 attempts" in v.error
    assert judge.stats["retries"] == 2 and len(judge.cache) == 0
