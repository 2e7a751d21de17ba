"""The group judge: the offline judge ranks the hand-made contrast blocks, its signals, the LLM group judge
over a fake OpenAI-compatible server (cache, timeouts), and the Stage-2 group reward on hand-made blocks."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mascot.evaluation.group_validation import contrast_pairs, validate
from mascot.group.dialogue import USER, Dialogue, Turn
from mascot.judges.group import GROUP_CRITERIA, GroupBlock, GroupVerdict, blocks_from_dialogue, load_group_judge, to_100


@pytest.fixture(scope="module")
def offline():
    return load_group_judge("offline")


def block(pack, turns, user="I failed my driving test again and I feel stupid."):
    return GroupBlock(Dialogue([Turn(USER, user)], situation="Failed a driving test."), [Turn(s, t) for s, t in turns], pack.active)


@pytest.mark.model  # the bundled MiniLM encoder
def test_offline_group_judge_ranks_contrast_blocks(offline) -> None:
    pairs = contrast_pairs()
    assert len(pairs) >= 40 and {p.kind for p in pairs} == {"repetitive", "offtopic", "monopoly", "contradict"}
    result = validate(offline, pairs)
    assert result["accuracy"] >= 0.9, result["by_kind"]


def test_offline_signals_move_the_right_way(offline, es_pack) -> None:
    varied = block(es_pack, [("Anchor", "Failing again after trying so hard really stings, and feeling stupid makes sense."),
                             ("Catalyst", "What happened in the test that felt different from your lessons?"),
                             ("Beacon", "Booking another attempt after two setbacks shows real persistence.")])
    mono = block(es_pack, [("Anchor", t.text) for t in varied.turns])
    v_varied, v_mono = offline.score_blocks([varied, mono])
    assert v_varied.valid and set(v_varied.scores) == set(GROUP_CRITERIA)
    assert v_varied.meta["signals"]["balance"] == 1.0 and v_mono.meta["signals"]["balance"] < 0.5
    assert v_varied.scores["engagement"] > v_mono.scores["engagement"]
    assert 0 <= to_100(v_varied.aggregate) <= 100
    empty = offline.score_blocks([block(es_pack, [])])[0]
    assert not empty.valid and "no persona turn" in empty.error


def test_blocks_from_dialogue_cut_after_the_opening(es_pack) -> None:
    d = Dialogue([Turn(USER, "u1"), Turn("Anchor", "a"), Turn("Catalyst", "c"), Turn(USER, "u2"), Turn("Beacon", "b"), Turn(USER, "u3")])
    blocks = blocks_from_dialogue(d, 1, es_pack.active, n=4)
    assert [len(b.turns) for b in blocks] == [4]  # the trailing user-only block is dropped
    assert blocks[0].context.turns[0].text == "u1"


class FakeGroupJudgeServer(BaseHTTPRequestHandler):
    calls: list[dict] = []
    slow: bool = False

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append(body)
        if type(self).slow:
            time.sleep(1.5)
        content = json.dumps({"fidelity": 4, "originality": 3, "Relevance & Coherence": 5, "engagement": 4,
                              "global state consistency": 2})
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out and hung up
            pass


@pytest.fixture
def group_server():
    FakeGroupJudgeServer.calls, FakeGroupJudgeServer.slow = [], False
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGroupJudgeServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_llm_group_judge_rubric_cache_and_timeout(group_server, tmp_path, es_pack) -> None:
    b = block(es_pack, [("Anchor", "That stings."), ("Catalyst", "What felt different?")])
    kw = dict(base_url=group_server, model="judge-g", api_key="k", cache_path=tmp_path / "g.sqlite", backoff=0.01)
    judge = load_group_judge("llm", **kw)
    v = judge.score_blocks([b, b])
    assert all(isinstance(x, GroupVerdict) and x.valid for x in v)
    assert v[0].scores == {"fidelity": 4.0, "originality": 3.0, "relevance": 5.0, "engagement": 4.0, "consistency": 2.0}
    assert len(FakeGroupJudgeServer.calls) == 1  # identical blocks asked once
    prompt = FakeGroupJudgeServer.calls[0]["messages"][-1]["content"]
    assert "Block to judge" in prompt and "Catalyst: What felt different?" in prompt and "group-rubric-v1" in prompt
    again = load_group_judge("llm", **kw).score_blocks([b])[0]
    assert again.valid and again.meta.get("cached") and len(FakeGroupJudgeServer.calls) == 1
    FakeGroupJudgeServer.slow = True  # a judge that times out: retried, then an invalid verdict, no crash
    slow = load_group_judge("llm", **{**kw, "timeout": 0.3, "max_retries": 1}).score_blocks([block(es_pack, [("Beacon", "You can!")])])[0]
    assert not slow.valid and "gave up after 2 attempts" in slow.error


def test_group_reward_on_hand_made_blocks(es_pack, offline) -> None:
    """The Stage-2 group reward: rollouts whose first directive leads to a better block score higher; an
    undecodable directive scores 0 without a rollout; a judge failure gives None (ignored by TRL)."""
    from mascot.backends.fake import FakeBackend
    from mascot.group.chat import GroupChat
    from mascot.group.director import Director
    from mascot.judges.group import GroupJudge
    from mascot.simusers import ReplaySimUser, SeekerScript
    from mascot.train.stage2.rewards import RewardEnv, make_format_reward, make_group_reward

    lines = {"Anchor": "Failing again after all that practice really stings, and it makes sense you feel low.",
             "Catalyst": "What happened during the test that felt different from your lessons?",
             "Beacon": "Booking another attempt after two setbacks shows real persistence."}
    fake = FakeBackend(responder=lambda m, p, a: lines.get(m[0]["content"].split(",")[0].removeprefix("You are "), "ok"))
    chat = GroupChat(fake, es_pack.active, mode="round-robin", max_speakers=2)
    script = SeekerScript("s", "Failed a driving test.", ["I failed my driving test again and I feel stupid.", "Yeah."])
    env = RewardEnv(chat, ReplaySimUser(), offline, es_pack.active, Director(2, False, 2), {"s": script}, block_turns=2)
    state = json.dumps(script.opening_dialogue().to_dict())
    completions = ['Anchor", "action": "Validate", "tone": "warm"}', 'Beacon", "action": "Encourage", "tone": "warm"}', "???"]
    rewards = make_group_reward(env)(completions, state=[state] * 3, script_id=["s"] * 3, state_id=["st"] * 3)
    assert rewards[2] == 0.0 and all(0 < r <= 1 for r in rewards[:2])
    assert make_format_reward(env)(completions, state=[state] * 3) == [1.0, 1.0, 0.0]

    class Broken(GroupJudge):
        def score_blocks(self, blocks):
            return [GroupVerdict.invalid("judge timed out") for _ in blocks]

    env.judge = Broken()
    assert make_group_reward(env)(completions[:1], state=[state], script_id=["s"], state_id=["st"]) == [None]
