from mascot.prompts import speaker_messages
from mascot.dialogue import Dialogue, Directive, Turn, USER
from mascot.speaker import clean_reply, has_meta_talk


def test_clean_strips_own_tag_and_cuts_other_speakers(es_pack):
    anchor, roster = es_pack.get("Anchor"), es_pack.active
    assert clean_reply("Anchor: That sounds hard.", anchor, roster) == "That sounds hard."
    assert clean_reply("**Anchor (Listener):** I hear you.", anchor, roster) == "I hear you."
    assert clean_reply("I hear you. Catalyst: What else?", anchor, roster) == "I hear you."
    assert clean_reply("I hear you.\nUser: thanks\nAnchor: ok", anchor, roster) == "I hear you."
    assert clean_reply("<think>plan</think> It makes sense.", anchor, roster) == "It makes sense."
    assert clean_reply("Thought: be kind\nReply: It makes sense.", anchor, roster) == "It makes sense."


def test_clean_bounds_length_at_sentence(es_pack):
    anchor = es_pack.get("Anchor")
    text = "This is a sentence. " * 60
    out = clean_reply(text, anchor, es_pack.active, max_chars=200)
    assert len(out) <= 200 and out.endswith(".")


def test_meta_talk():
    assert has_meta_talk("As an AI, I cannot feel.") and not has_meta_talk("I am here with you.")


def test_speaker_prompt_attributes_turns_and_includes_directive(es_pack):
    d = Dialogue([Turn(USER, "I failed."), Turn("Anchor", "That hurts.")], situation="driving test")
    msgs = speaker_messages(es_pack.get("Catalyst"), es_pack.active, d, Directive("Catalyst", "Ask why", "gentle"))
    system, user = msgs[0]["content"], msgs[1]["content"]
    assert "You are Catalyst" in system and "Ask why" in system and "Anchor" in system
    assert "User: I failed.\nAnchor: That hurts." in user and "Situation: driving test" in user
    plain = speaker_messages(es_pack.get("Catalyst"), es_pack.active, d, style="no-persona")
    assert "Catalyst" not in plain[0]["content"]
