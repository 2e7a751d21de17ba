"""The llamacpp backend on the embedded GGUF: generation semantics, adapter switching, the PEFT -> GGUF
LoRA converter (checked against transformers+peft), scoring and clear errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from mascot.backends import GenerationParams, load_backend, resolve_kind
from mascot.backends.llamacpp import LlamaCppBackend
from mascot.backends.llamacpp.check import load_hf_base, logit_change_correlation, random_lora, scaled_adapter
from mascot.backends.llamacpp.lora import BaseShape, convert_lora
from mascot.errors import BackendError

CKPT = Path(__file__).resolve().parents[1] / "checkpoints" / "tiny-cpu" / "speakers"
MSG = [{"role": "system", "content": "You are Anchor, a calm and steady friend."},
       {"role": "user", "content": "I failed my driving test again and I feel stupid."}]
GREEDY = GenerationParams(max_new_tokens=16, temperature=0.0)


@pytest.fixture(scope="module")
def strong(tmp_path_factory) -> dict[str, Path]:
    """The shipped anchor/beacon adapters with their effect scaled x4, so that greedy outputs of base, A and B
    differ: the shipped speakers alone leave this prompt's first 16 greedy tokens unchanged."""
    root = tmp_path_factory.mktemp("strong")
    return {key: scaled_adapter(CKPT / key, root / key, 4.0) for key in ("anchor", "beacon")}


@pytest.fixture(scope="module")
def llm(strong) -> LlamaCppBackend:
    backend = LlamaCppBackend("embedded", n_ctx=1024, n_seq=4)
    for key, path in strong.items():
        backend.add_adapter(f"speaker-{key}", str(path))
    return backend


# --------------------------------------------------------------------- generation
@pytest.mark.model
def test_stream_equals_generate_and_stops(llm):
    out = llm.generate([MSG], GREEDY)[0]
    assert out.completion_tokens > 0 and out.text
    assert "".join(llm.stream(MSG, GREEDY)) == out.text
    word = out.text.split()[1]
    cut = llm.generate([MSG], GREEDY.with_(stop=(word,)))[0]
    assert word not in cut.text and out.text.startswith(cut.text) and cut.finish_reason == "stop"
    assert llm.generate([MSG], GREEDY.with_(max_new_tokens=3))[0].completion_tokens == 3


@pytest.mark.model
def test_seeds_and_temperature(llm):
    p = GenerationParams(max_new_tokens=20, temperature=1.0, top_p=0.95, seed=7)
    a, b = (llm.generate([MSG], p)[0].text for _ in range(2))
    assert a == b, "the same seed must give the same sample"
    others = {llm.generate([MSG], p.with_(seed=s))[0].text for s in range(8, 12)}
    assert len(others | {a}) > 1, "different seeds must give different samples"


@pytest.mark.model
def test_prefill_is_not_repeated(llm):
    out = llm.generate([MSG], GREEDY.with_(prefill='{"speaker": "'))[0].text
    assert not out.startswith('{"speaker"')


def _at_first_divergence(llm, a: str, b: str) -> list[str]:
    """The two replies up to and including the first token where they differ (both whole when equal)."""
    ta, tb = llm.tokenize(a), llm.tokenize(b)
    k = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), None)
    if k is None:
        return [a, b]

    def piece(toks: list[int]) -> str:
        return b"".join(llm._model.token_to_piece(t).rstrip(b"\0") for t in toks).decode("utf-8", "ignore")

    return [piece(ta[: k + 1]), piece(tb[: k + 1])]


@pytest.mark.model
def test_batched_generation_matches_one_at_a_time(llm):
    """Batched greedy decoding is as good as one-at-a-time under the single-context model.

    llama.cpp's kernels round differently for other batch shapes, so a greedy near-tie can flip ("I'm
    sorry to hear that" vs "I'm sorry for your loss", 0.1 nats apart; an earlier trained Anchor on the haiku chat:
    "Konban| y" vs "Konban|ma", 0.27 nats apart in a flat distribution), after which the two replies go their
    own ways; exact text equality is therefore not the contract. At the first token where a batched reply
    leaves the one-at-a-time reply for its own chat, its token must score within 0.5 nats of the other one,
    which a sequence decoding on another sequence's keys and values (a reply to another chat) cannot."""
    card = {"role": "system", "content": MSG[0]["content"] + " You listen first, name the feeling, and never lecture. "
            "You keep replies to two sentences and you speak warmly, like a friend at the kitchen table."}
    chats = [[card, MSG[1]], [card, {"role": "user", "content": "My friend forgot my birthday."}],
             [card, {"role": "user", "content": "Write a haiku about bananas and trains."}]]
    if "raw-anchor" not in llm.adapters:
        llm.add_adapter("raw-anchor", str(CKPT / "anchor"))
    llm._forget_slots()  # _share_prefix runs on an empty cache, as generate() calls it
    assert llm._share_prefix([llm._prompt(c, GREEDY) for c in chats], len(chats)) > 32  # the card is prefilled once, then copied
    params = GREEDY.with_(max_new_tokens=8)
    for adapter in (None, "raw-anchor"):
        batched = llm.generate(chats, params, adapter=adapter)
        single = [llm.generate([c], params, adapter=adapter)[0] for c in chats]
        assert all(b.prompt_tokens == s.prompt_tokens for b, s in zip(batched, single))
        for chat, b, s in zip(chats, batched, single):
            mine, theirs = llm.score(chat, _at_first_divergence(llm, b.text, s.text), params, adapter=adapter)
            assert mine >= theirs - 0.5, (adapter, b.text, s.text, mine, theirs)
        # the probe: a reply written for another chat (the haiku) scores far lower under the driving-test chat
        own, foreign = llm.score(chats[0], [batched[0].text, batched[2].text], params, adapter=adapter)
        assert foreign < own - 5.0, (adapter, batched[0].text, batched[2].text)
        # the batch context keeps the shared card for the next call through the same adapter, apart from other adapters'
        assert len(llm._parked[adapter][1]) > 32
        assert [c.text for c in llm.generate(chats, params, adapter=adapter)][:1] == [batched[0].text]


@pytest.mark.model
def test_samples_of_one_prompt_share_one_prefill_and_match_one_at_a_time_by_seed():
    """Best-of-N on one prompt: one `generate` call prefills the prompt once and forks it to every sequence
    (N decodes, not N prefills), and sample i (seed s + i) is the one-at-a-time sample with seed s + i. On one
    weight format throughout: a reply's prompt on other weights shifts every probability a little, which moves
    a seeded draw to another token (the calibrated default may batch and prefill on different formats)."""
    llm = LlamaCppBackend("embedded", n_ctx=1024, n_seq=2, weights="q8_0", decode_weights="same")
    llm.add_adapter("speaker-anchor", str(CKPT / "anchor"))
    params = GenerationParams(max_new_tokens=24, temperature=0.7, top_p=0.9, seed=40)
    decoded: list[int] = []
    decode = llm._decode
    llm._decode = lambda entries, ctx=None, batch=None: decoded.append(len(entries)) or decode(entries, ctx, batch)
    batched = llm.generate([MSG] * 8, params, adapter="speaker-anchor")
    prompt = batched[0].prompt_tokens
    generated = sum(c.completion_tokens + (c.finish_reason == "stop") for c in batched)
    # the prompt but its last token once, its last token per sequence, then each sampled token but the last
    assert sum(decoded) == (prompt - 1) + 8 + generated - 8
    single = [llm.generate([MSG], params.with_(seed=40 + i), adapter="speaker-anchor")[0] for i in range(8)]
    assert len({c.text for c in batched}) >= 6, "different seeds draw different samples"
    same = [b.text == s.text for b, s in zip(batched, single)]
    assert sum(same) >= 6, [(b.text, s.text) for b, s in zip(batched, single)]
    for b, s in zip(batched, single):  # where kernel rounding flips a near-tie, only after a common start
        assert b.token_ids[:4] == s.token_ids[:4], (b.text, s.text)


@pytest.mark.model
def test_each_adapter_keeps_its_batch_prefix_while_others_run(strong, monkeypatch):
    """Speakers take turns through the batch context (a careful turn: Anchor's draws, then Beacon's, then
    Anchor's again): each adapter's prompt prefix is kept apart, so a returning adapter prefills only what is new,
    its replies are those of a backend that never ran another adapter, and an unloaded adapter's prefix goes."""
    def backend() -> LlamaCppBackend:
        b = LlamaCppBackend("embedded", n_ctx=1024, n_seq=2, weights="q8_0", decode_weights="same")
        for key, path in strong.items():
            b.add_adapter(f"speaker-{key}", str(path))
        return b

    llm, fresh = backend(), backend()
    params = GREEDY.with_(max_new_tokens=8)
    pair = [MSG, MSG]
    want = fresh.generate(pair, params, adapter="speaker-anchor")
    llm.generate(pair, params, adapter="speaker-anchor")
    llm.generate(pair, params, adapter="speaker-beacon")
    assert set(llm._parked) == {"speaker-anchor", "speaker-beacon"}
    decoded: list[int] = []
    decode = llm._decode
    monkeypatch.setattr(llm, "_decode", lambda e, ctx=None, batch=None: decoded.append(len(e)) or decode(e, ctx, batch))
    again = llm.generate(pair, params, adapter="speaker-anchor")
    prompt = again[0].prompt_tokens
    assert [c.text for c in again] == [c.text for c in want]
    assert sum(decoded) < prompt, "the kept prefix was not prefilled again"
    monkeypatch.setattr(llm, "PARKS", 1)  # one kept prefix: the least recently used one is dropped
    llm.generate(pair, params, adapter="speaker-beacon")
    assert list(llm._parked) == ["speaker-beacon"]
    assert [c.text for c in llm.generate(pair, params, adapter="speaker-anchor")] == [c.text for c in want]
    llm.remove_adapter("speaker-anchor")
    assert "speaker-anchor" not in llm._parked


@pytest.mark.model
def test_the_chat_context_is_made_only_when_a_single_reply_needs_it():
    """Batched draws (careful replies) and scoring (the director) run in their own contexts; the chat context's
    KV cells are allocated on the first single reply, with the backend's thread count."""
    llm = LlamaCppBackend("embedded", n_ctx=1024, n_seq=4, threads=1)
    llm.generate([MSG, MSG], GREEDY.with_(max_new_tokens=4))
    llm.score(MSG, ["Yes", "No"], GREEDY)
    assert llm._chat_context is None
    out = llm.generate([MSG], GREEDY)[0]
    assert llm._chat_context is not None and out.text
    assert llm.ll.llama_n_threads(llm.ctx) == 1


@pytest.mark.model
def test_draws_from_different_prefills_in_one_call_match_one_at_a_time(llm):
    """Best-of-N from different reply stems: one `generate_prefilled` call shares the chat's prefix, each draw
    continues its own stem, and each matches the one-at-a-time draw with that prefill (as above: within 0.5 nats
    at the first token where they part)."""
    stems = ["That sounds", "It makes sense that you feel", "That sounds"]
    params = GREEDY.with_(max_new_tokens=8)
    batched = llm.generate_prefilled([(MSG, p) for p in stems], params)
    single = [llm.generate([MSG], params.with_(prefill=p))[0] for p in stems]
    assert [b.prompt_tokens for b in batched] == [s.prompt_tokens for s in single]
    for stem, b, s in zip(stems, batched, single):
        with_stem = params.with_(prefill=stem)
        mine, theirs = llm.score(MSG, _at_first_divergence(llm, b.text, s.text), with_stem)
        assert mine >= theirs - 0.5, (stem, b.text, s.text)
    assert batched[0].text == batched[2].text  # greedy, same stem: the same draw


@pytest.mark.model
def test_continuous_batching_answers_more_chats_than_slots_in_order(monkeypatch):
    """Six chats on four batch slots, then on a KV budget that holds only two at once: finished replies hand
    their slot (which holds the shared card) to the next chat, and every chat gets its own reply, in order, as
    good as one-at-a-time for that chat (one weight format throughout, so the scores compare like with like)."""
    llm = LlamaCppBackend("embedded", n_ctx=1024, n_seq=4, weights="q8_0", decode_weights="same")
    monkeypatch.setattr(llm, "batch_seqs", 4)
    monkeypatch.setattr(llm, "_batch_cells", llm._batch_cells)
    topics = ["my driving test", "my birthday", "bananas and trains", "my new job", "the rain", "my old dog"]
    card = {"role": "system", "content": MSG[0]["content"] + " You listen first, name the feeling, and never lecture. "
            "You keep replies to two sentences and you speak warmly, like a friend at the kitchen table."}
    chats = [[card, {"role": "user", "content": f"Tell me one short thing about {t}."}] for t in topics]
    params = GREEDY.with_(max_new_tokens=12)
    single = [llm.generate([c], params)[0] for c in chats]
    batched = llm.generate(chats, params)
    shared = len(llm._parked[None][1])
    assert shared > 0
    llm._batch_cells = shared + 2 * (max(len(llm._prompt(c, params)) for c in chats) - shared + 12)
    tight = llm.generate(chats, params)
    for replies in (batched, tight):
        assert len(replies) == 6
        for chat, b, one in zip(chats, replies, single):
            assert b.prompt_tokens == one.prompt_tokens
            mine, theirs = llm.score(chat, [b.text, one.text], params)
            assert mine >= theirs - 0.5, (b.text, one.text)


@pytest.mark.model
def test_switching_a_b_a_gives_fresh_context_output_for_b(llm, strong):
    """A -> B -> A on one context: B's greedy output equals a fresh context that only ever ran B.

    Starts from an empty cache: a prefix cached by an earlier test was prefilled in a batch of another size,
    which rounds differently and can flip a late greedy near-tie (true of any llama.cpp prefix cache)."""
    llm._forget_slots()
    a1 = llm.generate([MSG], GREEDY, adapter="speaker-anchor")[0].text
    b1 = llm.generate([MSG], GREEDY, adapter="speaker-beacon")[0].text
    a2 = llm.generate([MSG], GREEDY, adapter="speaker-anchor")[0].text
    b2 = llm.generate([MSG], GREEDY, adapter="speaker-beacon")[0].text
    base = llm.generate([MSG], GREEDY)[0].text
    fresh = LlamaCppBackend("embedded", n_ctx=1024, n_seq=1, threads=llm.threads)  # one slot: every switch reuses the same cells
    fresh.add_adapter("speaker-beacon", str(strong["beacon"]))
    assert fresh.generate([MSG], GREEDY, adapter="speaker-beacon")[0].text == b1 == b2
    assert a1 == a2 and len({a1, b1, base}) == 3
    fresh.add_adapter("speaker-anchor", str(strong["anchor"]))
    for _ in range(2):  # with a single KV slot, A's cells must never serve B's prompt (and back)
        assert fresh.generate([MSG], GREEDY, adapter="speaker-anchor")[0].text == a1
        assert fresh.generate([MSG], GREEDY, adapter="speaker-beacon")[0].text == b1
    with pytest.raises(BackendError, match="not loaded"):
        llm.generate([MSG], GREEDY, adapter="nope")


@pytest.mark.model
def test_score_matches_logits(llm):
    names = ["Anchor", "Beacon", "zebra quantum"]
    p = GREEDY.with_(prefill='{"speaker": "')
    scores = llm.score(MSG, names, p, adapter="speaker-anchor")
    assert len(scores) == 3 and scores[2] < max(scores[:2])
    prompt = llm.tokenize(llm.render(MSG, p.prefill))
    for name, got in zip(names, scores):  # the same number from one full-sequence decode
        full = llm.tokenize(llm.render(MSG, p.prefill) + name)
        start = next(i for i, (a, b) in enumerate(zip(prompt + [-1], full)) if a != b)
        want = _logprob_sum(llm, full, start, "speaker-anchor")
        assert got == pytest.approx(want, abs=1e-3)


def _logprob_sum(llm: LlamaCppBackend, tokens: list[int], start: int, adapter: str | None) -> float:
    llm._activate(adapter)
    llm._forget_slots()
    llm._decode([(t, i, 0, True) for i, t in enumerate(tokens)])
    total = 0.0
    for t in range(start, len(tokens)):
        lg = llm._logits(t - 1).astype(np.float64)
        total += lg[tokens[t]] - lg.max() - np.log(np.exp(lg - lg.max()).sum())
    llm._forget_slots()
    return float(total)


@pytest.mark.model
def test_auto_resolves_to_llamacpp_on_cpu_and_registry_lists_it(tiny_model_dir):
    assert resolve_kind("auto") == "llamacpp"
    assert resolve_kind("auto", str(tiny_model_dir)) == "transformers"  # a transformers folder, no .gguf in it
    assert resolve_kind("transformers") == "transformers"
    assert isinstance(load_backend("llamacpp", model="embedded", dtype="auto", device="auto", n_seq=1, threads=1), LlamaCppBackend)


# ---------------------------------------------------------------- weight formats
@pytest.mark.model
def test_default_weights_follow_the_measured_formats(llm):
    """`auto` serves what this machine's format calibration measured fastest per job: prompts on its prefill
    winner, single replies on its decode winner, batches on the faster of the two loaded models."""
    f = llm.formats
    assert f is not None and f.source in ("cached", "measured")
    assert llm.weights == f.prefill and llm.decode_weights == f.decode
    assert llm.batch_weights == f.batch and llm._batch_flash_attn == f.batch_flash_attn
    if llm.weights != "native":
        assert llm.path != llm.source and llm.path.name.endswith(f"-{llm.weights}-v1.gguf")
    assert (llm._dmodel is not None) == (f.decode != f.prefill)
    out = llm.generate([MSG, MSG], GREEDY, adapter="speaker-anchor")  # the batch context on its model, adapter set
    assert all(o.text for o in out)


@pytest.mark.model
@pytest.mark.parametrize("weights", ["q8_0", "bf16"])
def test_reencoded_weights_keep_the_models_predictions(weights):
    """The Q8_0 and bfloat16 re-encodings of the Q4_1 file predict like the file itself: logits correlate and
    the greedy next token agrees at almost every position of a chat prompt."""
    backend = LlamaCppBackend("embedded", n_ctx=1024, n_seq=1, weights=weights, decode_weights="same")
    native = LlamaCppBackend("embedded", n_ctx=1024, n_seq=1, weights="native")
    assert native.path == native.source and backend.path.name.endswith(f"-{weights}-v1.gguf")
    a, b = backend.logits(MSG, GREEDY), native.logits(MSG, GREEDY)
    assert np.corrcoef(a.ravel(), b.ravel())[0, 1] >= 0.99
    assert (a.argmax(-1) == b.argmax(-1)).mean() >= 0.9
    assert LlamaCppBackend("embedded", n_ctx=1024, n_seq=1, weights=weights).path == backend.path  # converted once


@pytest.mark.model
def test_single_replies_decode_on_the_files_weights_after_a_q8_0_prompt(strong):
    """With `decode_weights=native` a single reply's prompt is decoded on the main weights (Q8_0 or bfloat16) and its keys and values handed to
    a second model on the file's Q4_1 weights, which decodes the rest: the handed-over cache predicts like a Q4_1
    prefill, with or without an adapter (set on the decoder too)."""
    llm = LlamaCppBackend("embedded", n_ctx=1024, n_seq=4, weights="q8_0", decode_weights="native")
    for key in ("anchor", "beacon"):
        llm.add_adapter(f"speaker-{key}", strong[key].as_posix())
    assert llm.decode_weights == "native" and llm._decoder is not None
    native = LlamaCppBackend("embedded", n_ctx=1024, n_seq=1, weights="native", decode_weights="same")
    prompt = llm.tokenize(llm.render(MSG))
    for adapter in (None, "speaker-anchor"):
        if adapter:
            native.add_adapter(adapter, llm.adapters[adapter])
        llm._activate(adapter)
        llm._forget_slots()
        llm._decode([(t, p, 2, False) for p, t in enumerate(prompt)])
        dctx = llm._hand_over(2)
        assert dctx is not None
        llm._activate(adapter, dctx)
        llm._decode([(prompt[-1], len(prompt), 0, True)], ctx=dctx)
        handed = llm._logits(0, dctx).copy()
        native._activate(adapter)
        native._forget_slots()
        native._decode([(t, p, 0, p == len(prompt)) for p, t in enumerate([*prompt, prompt[-1]])])
        ref = native._logits(len(prompt)).copy()
        assert np.corrcoef(handed, ref)[0, 1] >= 0.995 and handed.argmax() == ref.argmax()
    llm._forget_slots()
    assert "decoding native" in llm.info().model
    out = llm.generate([MSG], GREEDY, adapter="speaker-anchor")[0]
    assert 0 < out.completion_tokens <= GREEDY.max_new_tokens and out.text  # the trained Anchor may stop early


@pytest.mark.model
def test_refused_hand_over_falls_back_to_the_main_weights(strong, monkeypatch):
    """If llama.cpp refuses the rewritten state, the reply is still generated (on the main weights) and later
    replies stop trying the decoder."""
    backend = LlamaCppBackend("embedded", n_ctx=1024, n_seq=2, weights="q8_0", decode_weights="native")
    backend.add_adapter("speaker-anchor", str(strong["anchor"]))
    want = backend.generate([MSG], GREEDY, adapter="speaker-anchor")[0]
    monkeypatch.setattr(backend.ll, "llama_state_seq_set_data", lambda *a: 0)
    got = backend.generate([MSG], GREEDY, adapter="speaker-anchor")[0]
    # the fallback decodes on other weights, so a reply that stops early may stop elsewhere (the shipped Anchor does)
    assert 0 < got.completion_tokens <= GREEDY.max_new_tokens and got.text and want.text
    assert backend._decoder is None and backend.decode_weights == backend.weights
    same = LlamaCppBackend("embedded", n_ctx=1024, n_seq=1, decode_weights="same")
    assert same._decoder is None and same.decode_weights == same.weights
    with pytest.raises(BackendError, match="auto, same, native, q8_0, bf16, f32"):
        LlamaCppBackend("embedded", n_ctx=1024, n_seq=1, decode_weights="q2_k")


def test_unknown_weight_format_names_the_valid_ones():
    with pytest.raises(BackendError, match="auto, native, q8_0, bf16, f32"):
        LlamaCppBackend("embedded", weights="q2_k")


@pytest.mark.model
def test_score_groups_many_continuations_and_reuses_the_prompt(llm):
    """More continuations than one scoring batch holds give the same numbers as scoring each alone, and the
    next call with a longer prompt decodes only what was added."""
    conts = [f"option {i}" for i in range(LlamaCppBackend.SCORE_SEQS + 5)]
    p = GREEDY.with_(prefill='{"speaker": "')
    together = llm.score(MSG, conts, p)
    alone = [llm.score(MSG, [c], p)[0] for c in conts[:3]]
    # llama.cpp picks its matrix kernels by batch size, so a 60-token batch rounds differently (about 1%)
    assert together[:3] == pytest.approx(alone, rel=0.02)
    assert together[-3:] == pytest.approx([llm.score(MSG, [c], p)[0] for c in conts[-3:]], rel=0.02)
    longer = MSG + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "and now?"}]
    cached = llm._score_cache[1]
    llm.score(longer, conts[:2], p)
    assert llm._score_cache[1][: len(cached) - 8] == cached[: len(cached) - 8]


# ------------------------------------------------------------------------ errors
def test_missing_and_corrupt_gguf(tmp_path):
    with pytest.raises(BackendError, match="does not exist"):
        LlamaCppBackend(str(tmp_path / "nope.gguf"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(BackendError, match="not a readable GGUF"):
        LlamaCppBackend(str(bad))


@pytest.mark.model
def test_adapter_errors(llm, tmp_path, tiny_model_dir):
    from tests.test_backends import make_lora

    other = make_lora(tiny_model_dir, tmp_path / "other", seed=1)  # hidden size 16, not 576
    with pytest.raises(BackendError, match="trained on another base model"):
        llm.add_adapter("other", str(other))
    with pytest.raises(BackendError, match="not a PEFT adapter folder"):
        llm.add_adapter("empty", str(tmp_path))
    with pytest.raises(BackendError, match="does not exist"):
        llm.add_adapter("gone", str(tmp_path / "gone"))
    broken = tmp_path / "broken"
    shutil.copytree(CKPT / "anchor", broken)
    (broken / "adapter_model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(BackendError, match="corrupt"):
        llm.add_adapter("broken", str(broken))
    patterned = tmp_path / "patterned"
    shutil.copytree(CKPT / "anchor", patterned)
    cfg = json.loads((patterned / "adapter_config.json").read_text())
    cfg["rank_pattern"] = {"q_proj": 4}
    (patterned / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(BackendError, match="rank_pattern"):
        llm.add_adapter("patterned", str(patterned))
    with pytest.raises(BackendError, match="supports llama only"):
        convert_lora(CKPT / "anchor", BaseShape("qwen2", 30, 576, 9, 3, 1536), out_dir=tmp_path)
    assert "other" not in llm.adapters and "broken" not in llm.adapters


@pytest.mark.model
def test_engine_falls_back_to_prompted_with_warning(llm, tmp_path, tiny_model_dir):
    from mascot.group.engine import Engine, EngineConfig
    from mascot.group.personas import load_pack
    from tests.test_backends import make_lora

    pack = load_pack("emotional-support").copy()
    pack.get("Catalyst").adapter = str(make_lora(tiny_model_dir, tmp_path / "wrong", seed=2))
    engine = Engine(EngineConfig(backend="llamacpp"), llm)
    warnings = engine.attach_adapters(pack)
    assert any("Catalyst" in w and "another base model" in w and "prompted base model" in w for w in warnings)
    assert "speaker-catalyst" not in llm.adapters


# ---------------------------------------------------------------- the converter
@pytest.mark.model
def test_converter_writes_adapter_metadata_and_permuted_q_k(tmp_path, llm):
    import gguf
    from safetensors.numpy import load_file

    from mascot.backends.llamacpp.lora import permute_rows

    out = convert_lora(CKPT / "anchor", llm.shape, out_dir=tmp_path)
    assert convert_lora(CKPT / "anchor", llm.shape, out_dir=tmp_path) == out  # cached by content hash
    r = gguf.GGUFReader(out)
    field = lambda k: r.fields[k].contents()  # noqa: E731
    assert field("general.type") == "adapter" and field("adapter.type") == "lora"
    assert field("general.architecture") == "llama" and field("adapter.lora.alpha") == 16.0
    tensors = {t.name: np.asarray(t.data) for t in r.tensors}
    assert "blk.20.attn_q.weight.lora_a" in tensors and "blk.29.attn_output.weight.lora_b" in tensors
    peft = load_file(str(CKPT / "anchor" / "adapter_model.safetensors"))
    q_b = peft["base_model.model.model.layers.20.self_attn.q_proj.lora_B.weight"].astype(np.float32)
    k_b = peft["base_model.model.model.layers.20.self_attn.k_proj.lora_B.weight"].astype(np.float32)
    v_b = peft["base_model.model.model.layers.20.self_attn.v_proj.lora_B.weight"].astype(np.float32)
    np.testing.assert_array_equal(tensors["blk.20.attn_q.weight.lora_b"], permute_rows(q_b, 9))
    np.testing.assert_array_equal(tensors["blk.20.attn_k.weight.lora_b"], permute_rows(k_b, 3))
    np.testing.assert_array_equal(tensors["blk.20.attn_v.weight.lora_b"], v_b)


def test_adapter_tensors_are_read_without_torch(tmp_path):
    """The converter reads safetensors with numpy alone: float32 as stored, bfloat16 widened exactly, the same
    values torch reads; a file that is not safetensors is an error."""
    import torch
    from safetensors.torch import load_file, save_file

    from mascot.backends.llamacpp.lora import read_safetensors

    torch.manual_seed(0)
    tensors = {"b.weight": torch.randn(3, 5), "a.weight": torch.randn(4, 2).to(torch.bfloat16),
               "c.weight": torch.randn(2, 2).to(torch.float16)}
    save_file(tensors, tmp_path / "t.safetensors")
    got = read_safetensors(tmp_path / "t.safetensors")
    want = {k: v.float().numpy() for k, v in load_file(str(tmp_path / "t.safetensors")).items()}
    assert list(got) == sorted(want)
    for k in want:
        assert got[k].dtype == np.float32
        np.testing.assert_array_equal(got[k], want[k])
    (tmp_path / "bad.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(ValueError):
        read_safetensors(tmp_path / "bad.safetensors")


@pytest.mark.model
def test_rslora_alpha(tmp_path, llm):
    import gguf

    folder = tmp_path / "rs"
    shutil.copytree(CKPT / "anchor", folder)
    cfg = json.loads((folder / "adapter_config.json").read_text())
    cfg["use_rslora"] = True
    (folder / "adapter_config.json").write_text(json.dumps(cfg))
    r = gguf.GGUFReader(convert_lora(folder, llm.shape, out_dir=tmp_path))
    assert r.fields["adapter.lora.alpha"].contents() == pytest.approx(16 * 8 ** 0.5)


# ------------------------------------------ transformers+peft vs llama.cpp logit change
@pytest.fixture(scope="module")
def hf_model():
    return load_hf_base()


@pytest.mark.model
@pytest.mark.parametrize("key", ["anchor", "beacon", "catalyst"])
def test_shipped_adapter_changes_logits_like_peft(llm, hf_model, key, tmp_path):
    """The shipped adapter's own effect (about 0.35 std) sits near llama.cpp's quantisation noise floor
    (about 0.2), so it is held to 0.85 as shipped and to 0.95 with its effect scaled x4 (same tensors)."""
    raw = logit_change_correlation(llm, hf_model, CKPT / key, f"raw-{key}")
    x4 = logit_change_correlation(llm, hf_model, scaled_adapter(CKPT / key, tmp_path / key, 4.0), f"x4-{key}")
    assert x4 >= 0.95 and raw >= 0.85, f"{key}: logit-change correlation x4 {x4:.3f} (>= 0.95), raw {raw:.3f} (>= 0.85)"


@pytest.mark.model
def test_shipped_adapters_change_logits_like_peft_on_reference_weights(hf_model):
    """On the exact de-quantised weights (`f32`), llama.cpp computes with the values transformers uses, so the
    converted adapters must reproduce peft's logit change (>= 0.95) however weak their effect."""
    ref = LlamaCppBackend("embedded", n_ctx=1024, n_seq=1, weights="f32")
    run = CKPT.parent
    folders = [CKPT / k for k in ("anchor", "beacon", "catalyst")] + [run / "director"]
    got = {d.name: logit_change_correlation(ref, hf_model, d, f"ref-{d.name}") for d in folders}
    assert all(r >= 0.95 for r in got.values()), got


@pytest.mark.model
def test_random_lora_changes_logits_like_peft_and_needs_the_permutation(llm, hf_model, tmp_path, monkeypatch):
    every = random_lora(hf_model, tmp_path / "rand", ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], 0)
    qk = random_lora(hf_model, tmp_path / "qk", ["q_proj", "k_proj"], 1)
    r_all = logit_change_correlation(llm, hf_model, every, "rand")
    r_qk = logit_change_correlation(llm, hf_model, qk, "qk")
    assert r_all >= 0.95 and r_qk >= 0.95, (r_all, r_qk)
    import mascot.backends.llamacpp.lora as conv

    monkeypatch.setattr(conv, "permute_rows", lambda w, n_head: w)  # the converter without the permutation
    unpermuted = conv.convert_lora(qk, llm.shape, out_dir=tmp_path / "noperm")
    r_bad = logit_change_correlation(llm, hf_model, unpermuted, "qk-unpermuted", peft_dir=qk)
    assert r_bad < 0.95, f"without the q/k permutation the correlation is still {r_bad:.3f}"


# ------------------------------------------- engine, chat handlers and API on the llamacpp backend
@pytest.fixture
def llm_engine(llm):
    from mascot.files.checkpoints import find_run
    from mascot.group.engine import Engine, EngineConfig
    from mascot.group.personas import load_pack

    engine = Engine(EngineConfig(backend="llamacpp"), llm, run_dir=find_run(str(CKPT.parents[1])))
    engine.attach_adapters(load_pack("emotional-support"))
    assert {"speaker-anchor", "speaker-beacon", "speaker-catalyst"} <= set(llm.adapters)
    return engine


@pytest.mark.model
def test_chat_handlers_stream_trained_speakers_on_llamacpp(llm_engine, tmp_path):
    from app.chat_tab import ChatHandlers
    from app.settings import Settings
    from tests.test_app_chat import send

    h = ChatHandlers(llm_engine, Settings(data_dir=str(tmp_path), backend="llamacpp"))
    msgs, session, frames = send(h, h.new_session(), "I feel lonely since I moved.")
    assert len(frames) > 3  # streamed token by token
    turns = [t for t in session.dialogue.turns if t.speaker != "user"]
    assert [t.speaker for t in turns] == ["Anchor", "Catalyst", "Beacon"] and all(t.text.strip() for t in turns)
    assert "llamacpp" in h.status(session) and "Anchor, Catalyst, Beacon" in h.status(session)


@pytest.mark.model
@pytest.mark.live
def test_gradio_client_api_on_llamacpp(llm_engine, port, tmp_path):
    from gradio_client import Client

    from app.server import build_server
    from app.settings import Settings
    from tests.conftest import run_uvicorn

    settings = Settings(data_dir=str(tmp_path), backend="llamacpp", mode="round-robin", port=port)
    server, _ = run_uvicorn(build_server(settings, llm_engine), port)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        turns = client.predict("I feel lonely", [], "emotional-support", "round-robin", 2, 0, api_name="/chat")
        assert [t["speaker"] for t in turns] == ["user", "Anchor", "Catalyst"] and all(t["text"] for t in turns)
    finally:
        server.should_exit = True


@pytest.mark.model
def test_a_run_put_live_on_llamacpp_answers_with_its_own_adapters(llm_engine, strong, tmp_path):
    """The same weights under a live version's name give the same greedy reply as under the start-up name, and
    both stay loaded."""
    import shutil

    from mascot.backends.base import GenerationParams

    shutil.copytree(strong["anchor"], tmp_path / "copy" / "speakers" / "anchor")  # what speaker-anchor serves
    live = llm_engine.put_live(tmp_path / "copy")
    try:
        assert live.names["anchor"] == "speaker-anchor@v1" and "speaker-anchor@v1" in llm_engine.backend.adapters
        chat = [{"role": "user", "content": "I failed my driving test again."}]
        greedy = GenerationParams(max_new_tokens=16, temperature=0.0)
        before = llm_engine.backend.generate([chat], greedy, adapter="speaker-anchor")[0].text
        after = llm_engine.backend.generate([chat], greedy, adapter="speaker-anchor@v1")[0].text
        assert before == after
    finally:
        llm_engine.roll_back()
        for name in live.names.values():
            if name.endswith("@v1"):
                llm_engine.backend.remove_adapter(name)


@pytest.mark.model
def test_thread_calibration_measures_only_when_other_work_holds_the_cores(monkeypatch):
    import os

    from mascot.backends.llamacpp.runtime import ThreadCalibration

    llm = LlamaCppBackend("embedded", n_ctx=512, n_seq=1, threads=None)
    if llm.cores < 2:
        pytest.skip("one core: nothing to choose")
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    ThreadCalibration._calibrate_threads(llm)
    assert llm.calibration == {"skipped_at_load_per_core": 0.0} and llm.threads == llm.cores
    monkeypatch.setattr(os, "getloadavg", lambda: (5.0 * llm.cores, 0.0, 0.0))
    llm.calibration = {}
    ThreadCalibration._calibrate_threads(llm)
    assert set(llm.calibration) == {1, llm.cores} and llm.threads in (1, llm.cores)
