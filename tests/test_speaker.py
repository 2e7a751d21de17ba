from mascot.group.cleaning import clean_reply, cut_meta_talk, has_meta_talk, has_stage_direction, might_open_meta
from mascot.group.dialogue import USER, Dialogue, Directive, Turn
from mascot.group.prompts import speaker_messages


def test_clean_strips_own_tag_and_cuts_other_speakers(es_pack):
    anchor, roster = es_pack.get("Anchor"), es_pack.active
    assert clean_reply("Anchor: That sounds hard.", anchor, roster) == "That sounds hard."
    assert clean_reply("**Anchor (Listener):** I hear you.", anchor, roster) == "I hear you."
    assert clean_reply("I hear you. Catalyst: What else?", anchor, roster) == "I hear you."
    assert clean_reply("I hear you.\nUser: thanks\nAnchor: ok", anchor, roster) == "I hear you."
    assert clean_reply("<think>plan</think> It makes sense.", anchor, roster) == "It makes sense."
    assert clean_reply("Thought: be kind\nReply: It makes sense.", anchor, roster) == "It makes sense."
    # labels echoed from the prompt: the persona's tones and the prompt's headings
    assert clean_reply("Calm and empathetic: That must hurt.", anchor, roster) == "That must hurt."
    assert clean_reply("**Soft and reassuring:** You're not alone.", anchor, roster) == "You're not alone."
    assert clean_reply("Tone: I hear you.", anchor, roster) == "I hear you."
    assert clean_reply("Calm and empathetic, I hear you.", anchor, roster) == "Calm and empathetic, I hear you."


def test_clean_bounds_length_at_sentence(es_pack):
    anchor = es_pack.get("Anchor")
    text = "This is a sentence. " * 60
    out = clean_reply(text, anchor, es_pack.active, max_chars=200)
    assert len(out) <= 200 and out.endswith(".")


def test_stage_directions_are_found_and_removed(es_pack):
    """Trained 135M speakers narrate themselves ("(sighing) Ah, alright."); the chat shows the words only."""
    anchor, roster = es_pack.get("Anchor"), es_pack.active
    assert clean_reply("(sighing) Ah, alright. That sounds heavy.", anchor, roster) == "Ah, alright. That sounds heavy."
    assert clean_reply("What happened? (Reflective pause) You know, I hear you.", anchor, roster) == \
        "What happened? You know, I hear you."
    assert clean_reply("(The user explains why they're sad about losing their pet) I'm so sorry.", anchor, roster) == "I'm so sorry."
    kept = "Talking to someone (a friend, or a counsellor) could help."
    assert clean_reply(kept, anchor, roster) == kept and not has_stage_direction(kept)
    assert has_stage_direction("(laughs) Sure.") and not has_stage_direction("I see (really) what you mean.")
    assert not has_stage_direction("Try a walk. (It helps me too.) Then rest.") and not has_stage_direction("Okay. (base)")


def test_emoji_and_hashtag_runs_are_trimmed(es_pack):
    """A reply that ends in a dozen emoji or a row of hashtags keeps its words and one emoji; a single emoji
    (with its skin tone or joiner sequence) is left alone, everywhere clean_reply runs (chat, training, eval)."""
    beacon, roster = es_pack.get("Beacon"), es_pack.active
    assert clean_reply("I'm here to support you every step of the way! 🚀💡🏼👨‍🔬🎉💪🔥🔮🐦✨", beacon, roster) == \
        "I'm here to support you every step of the way! 🚀"
    assert clean_reply("You did it. 🎉 🎉 🎉 #Proud #Growth #YouGotThis", beacon, roster) == "You did it. 🎉"
    for kept in ("I'm glad you reached out! 😊 That matters.", "Great job 👍🏽 keep going.", "Tip #1: breathe slowly."):
        assert clean_reply(kept, beacon, roster) == kept


def test_meta_talk():
    assert has_meta_talk("As an AI, I cannot feel.") and not has_meta_talk("I am here with you.")
    for line in ("Here's a revised version of your text.", "Here is the revised text.", "Here is your next message.",
                 "Here's an example of how you could respond.", "Here's how you can respond.", "Here is an example response."):
        assert has_meta_talk(line) and cut_meta_talk(line) == ""
    assert cut_meta_talk("That sounds hard. Here is an edited version of your text. Bye.") == "That sounds hard."
    assert cut_meta_talk("Here with you, always.") == "Here with you, always."
    assert might_open_meta("Here") and might_open_meta("Here's a") and might_open_meta("The")
    assert not might_open_meta("Here with you") and not might_open_meta("That sounds hard")
    assert not might_open_meta("Here's a thought: maybe a short walk after work could clear your head")
    assert not has_meta_talk("Here's an example of a time I felt lonely too.") and not has_meta_talk("Here's how you can start: one call a week.")


def test_meta_talk_is_drawn_again_and_never_shown(es_pack, fake_backend):
    """A reply that is meta talk from its first sentence is drawn again with another seed (streamed: its opening
    was held back, so the user never sees it); one that turns to it later ends before that sentence."""
    from mascot.group.cleaning import META_REDRAWS
    from mascot.group.speaker import Speaker

    anchor, roster = es_pack.get("Anchor"), es_pack.active
    d = Dialogue([Turn(USER, "I failed my driving test again.")])
    sp = Speaker(fake_backend)
    fake_backend.enqueue("Here's a revised version of your text.", "That must sting. You can try again.")
    streamed = list(sp.stream(anchor, roster, d, None, seed=5))
    assert streamed[-1] == "That must sting. You can try again."
    assert not any("revised" in s or s.startswith("Here") for s in streamed)
    assert [c.params.seed for c in fake_backend.calls[-2:]] == [5, 5 + 7919]
    fake_backend.enqueue("That must sting. Here is the edited version of the conversation. More.")
    assert list(sp.stream(anchor, roster, d, None, seed=1))[-1] == "That must sting."
    fake_backend.enqueue("Here is the revised text.", "Fine words, and good ones.", "Here is the revised text.",
                         "Here is the revised text.")
    n = len(fake_backend.calls)
    got = sp.reply_batch([(anchor, roster, d, None), (anchor, roster, d, None)], seed=3)
    assert got == ["", "Fine words, and good ones."] and len(fake_backend.calls) - n == 2 + META_REDRAWS
    fake_backend.enqueue("Here is the revised text.", "You did well to try.")
    assert sp.reply_batch([(anchor, roster, d, None)], seed=3) == ["You did well to try."]
    fake_backend.enqueue(*["Here is the revised text."] * (META_REDRAWS + 1))
    n = len(fake_backend.calls)
    assert list(sp.stream(anchor, roster, d, None, seed=2))[-1] == ""  # the chat shows its empty-reply mark
    assert len(fake_backend.calls) - n == META_REDRAWS + 1


def test_speaker_prompt_attributes_turns_and_includes_directive(es_pack):
    d = Dialogue([Turn(USER, "I failed."), Turn("Anchor", "That hurts.")], situation="driving test")
    msgs = speaker_messages(es_pack.get("Catalyst"), es_pack.active, d, Directive("Catalyst", "Ask why", "gentle"))
    system, user = msgs[0]["content"], msgs[1]["content"]
    assert "You are Catalyst" in system and "Ask why" in system and "Anchor" in system
    assert "User: I failed.\nAnchor: That hurts." in user and "Situation: driving test" in user
    plain = speaker_messages(es_pack.get("Catalyst"), es_pack.active, d, style="no-persona")
    assert "Catalyst" not in plain[0]["content"]


# ---------------------------------------------------------------- clean endings
CUT = "That sounds really exhausting for you. It makes sense that you would feel tired when the"


def test_finish_sentence_rules():
    from mascot.group.cleaning import finish_sentence, is_finished

    assert finish_sentence(CUT) == "That sounds really exhausting for you."
    assert finish_sentence("I hear you.") == "I hear you."
    assert finish_sentence("You did something brave there, and honestly I") == "You did something brave there."
    assert finish_sentence("You handled that with real courage and") == "You handled that with real courage."
    assert finish_sentence("What a day 🙂") == "What a day 🙂"
    assert finish_sentence("") == ""
    for text in (CUT, "one", "so and the", "Wait, what about the"):
        assert is_finished(finish_sentence(text)), text


def _assert_clean_endings(replies):
    from mascot.group.cleaning import is_finished

    assert replies and all(is_finished(r) for r in replies if r), replies


def test_fake_backend_replies_end_at_a_sentence_boundary(es_pack, fake_backend):
    from mascot.group.speaker import Speaker

    anchor, roster = es_pack.get("Anchor"), es_pack.active
    fake_backend.enqueue(CUT, CUT)
    sp = Speaker(fake_backend)
    d = Dialogue([Turn(USER, "I am so tired of everything.")])
    assert sp.reply_batch([(anchor, roster, d, None)]) == ["That sounds really exhausting for you."]
    streamed = list(sp.stream(anchor, roster, d, None))
    assert streamed[-1] == "That sounds really exhausting for you."  # the final streamed value is trimmed
    assert any(s.endswith("when the") for s in streamed[:-1])  # partial text is shown untrimmed while streaming


def test_openai_backend_replies_end_at_a_sentence_boundary(es_pack):
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from mascot.backends import load_backend
    from mascot.group.speaker import Speaker

    class _Server(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            raw = json.dumps({"choices": [{"message": {"content": CUT}, "finish_reason": "length"}],
                              "usage": {"prompt_tokens": 3, "completion_tokens": 20}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    srv = HTTPServer(("127.0.0.1", 0), _Server)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        be = load_backend("openai", model="m", base_url=f"http://127.0.0.1:{srv.server_port}/v1")
        anchor, roster = es_pack.get("Anchor"), es_pack.active
        out = Speaker(be).reply_batch([(anchor, roster, Dialogue([Turn(USER, "hi")]), None)] * 2)
    finally:
        srv.shutdown()
        srv.server_close()
    assert out == ["That sounds really exhausting for you."] * 2


def test_transformers_backend_replies_end_at_a_sentence_boundary(es_pack, tiny_model_dir):
    """A tiny random model stops anywhere; every reply the speaker returns still ends a sentence."""
    from mascot.backends.base import GenerationParams
    from mascot.backends.transformers_backend import TransformersBackend
    from mascot.group.speaker import Speaker

    be = TransformersBackend(str(tiny_model_dir), dtype="float32")
    sp = Speaker(be, GenerationParams(max_new_tokens=12, temperature=1.0, top_p=1.0))
    roster = es_pack.active
    items = [(p, roster, Dialogue([Turn(USER, f"message {i}")]), None) for i, p in enumerate(roster)]
    raw = [c.text for c in be.generate([sp.messages(*it) for it in items], sp.params.with_(seed=3))]
    assert any(r.strip() for r in raw)
    _assert_clean_endings(sp.reply_batch(items, seed=3))


def test_fragment_replies_are_drawn_again_and_the_longest_kept(es_pack, fake_backend):
    """A reply of fewer than MIN_REPLY_WORDS words ("Theater.") is drawn again like meta talk: streamed, it is never
    shown; when every draw is a fragment, the one with the most words is kept."""
    from mascot.group.cleaning import META_REDRAWS, MIN_REPLY_WORDS, count_words
    from mascot.group.speaker import Speaker

    anchor, roster = es_pack.get("Anchor"), es_pack.active
    d = Dialogue([Turn(USER, "My grandmother's house is being torn down.")])
    sp = Speaker(fake_backend)
    fake_backend.enqueue("Theater.", "Losing that house must hurt.")
    streamed = list(sp.stream(anchor, roster, d, None, seed=4))
    assert streamed[-1] == "Losing that house must hurt." and not any("Theater" in s for s in streamed)
    fake_backend.enqueue("Laughter!", "You are brave.")  # three words make a reply
    assert count_words("You are brave.") == MIN_REPLY_WORDS
    assert sp.reply_batch([(anchor, roster, d, None)], seed=1) == ["You are brave."]
    fake_backend.enqueue("Sounds good.", "Oh.", "Hm.")
    n = len(fake_backend.calls)
    assert list(sp.stream(anchor, roster, d, None, seed=2))[-1] == "Sounds good."
    assert len(fake_backend.calls) - n == META_REDRAWS + 1
    fake_backend.enqueue("Oh.", "That was your summer home.", "Sounds good.", "Oh.")  # only the first is drawn again
    got = sp.reply_batch([(anchor, roster, d, None), (anchor, roster, d, None)], seed=3)
    assert got == ["Sounds good.", "That was your summer home."] and not fake_backend.queue


def test_a_copy_of_an_earlier_turn_is_drawn_again_and_never_shown(es_pack, fake_backend):
    """A reply that repeats an earlier persona turn of the conversation ("Hello there! Welcome to my office!" twice
    in one round) is drawn again; streamed, it is held back while its words are the start of an earlier turn, so the
    copy never reaches the user. The user's own words may be echoed."""
    from mascot.group.cleaning import META_REDRAWS, copying_so_far, earlier_turns, repeats_turn
    from mascot.group.speaker import Speaker

    anchor, catalyst, roster = es_pack.get("Anchor"), es_pack.get("Catalyst"), es_pack.active
    d = Dialogue([Turn(USER, "My best friend is moving abroad."), Turn("Catalyst", "Hello there! Welcome to my office today.")])
    earlier = earlier_turns(d)
    assert earlier == [["hello", "there", "welcome", "to", "my", "office", "today"]]
    assert repeats_turn("Hello there, welcome to my office today!", earlier)
    assert not repeats_turn("My best friend is moving abroad.", earlier)  # echoing the user is not a repeat
    assert copying_so_far("Hello there! Welc", earlier) and not copying_so_far("Hello there! I'm", earlier)
    sp = Speaker(fake_backend)
    fake_backend.enqueue("Hello there! Welcome to my office today.", "Moving away from a best friend is hard.")
    streamed = list(sp.stream(anchor, roster, d, None, seed=6))
    assert streamed[-1] == "Moving away from a best friend is hard." and not any("office" in s for s in streamed)
    fake_backend.enqueue(*["Hello there! Welcome to my office today."] * (META_REDRAWS + 1))
    assert sp.reply_batch([(anchor, roster, d, None)], seed=2) == ["Hello there! Welcome to my office today."]
    fake_backend.enqueue("Hello there! Welcome to my office today.", "Oh.", "You two must be close.")
    assert sp.reply_batch([(catalyst, roster, d, None)], seed=2) == ["You two must be close."]
    fake_backend.enqueue("Hello there! Welcome to my office today.", "", "Oh.")  # a copy beats an empty reply
    assert list(sp.stream(anchor, roster, d, None, seed=3))[-1] == "Hello there! Welcome to my office today."
