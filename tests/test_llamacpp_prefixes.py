"""System messages' keys and values kept on disk (mascot/backends/llamacpp/prefixes.py): a new process restores
them instead of prefilling, scores and samples as before, never stores the user's words, and falls back to
prefilling when a file is damaged or refused."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from mascot.backends import GenerationParams
from mascot.backends.llamacpp.prefixes import MAX_FILES, PrefixStore
from mascot.group.dialogue import Dialogue, Turn
from mascot.group.personas import load_pack
from mascot.group.prompts import director_messages, speaker_messages

USER = "Work has been really stressful lately and I can't switch off in the evenings."
GREEDY = GenerationParams(max_new_tokens=12, temperature=0.0)
STEMS = ("I hear", "That sounds", "It makes")


def _backend(store_dir: Path, keep: bool = True):  # type: ignore[no-untyped-def]
    from mascot.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend("embedded", n_ctx=1024, n_seq=1, keep_prefixes=keep)
    if keep:
        backend.prefixes = PrefixStore(store_dir, ["test"])
    decoded = {"tokens": 0}
    decode, score_group = backend._decode, backend._score_group

    def counting_decode(entries, ctx=None, batch=None):  # type: ignore[no-untyped-def]
        decoded["tokens"] += len(entries)
        return decode(entries, ctx, batch)

    def counting_score_group(ctx, mem, batch, fulls, starts, common, tail, tail_pos):  # type: ignore[no-untyped-def]
        decoded["tokens"] += len(tail)
        return score_group(ctx, mem, batch, fulls, starts, common, tail, tail_pos)

    backend._decode, backend._score_group = counting_decode, counting_score_group
    return backend, decoded


def _turn(backend):  # type: ignore[no-untyped-def]
    """The director's speaker choice and three draws of one speaker, as a careful turn asks of the backend;
    returns (scores, texts, the two prompts' system-message tokens)."""
    pack = load_pack("emotional-support")
    dialogue = Dialogue([Turn("user", USER)])
    director = director_messages(pack.active, dialogue, 3)
    prefill = GenerationParams(prefill='{"speaker": "')
    scores = backend.score(director, ['Anchor"', 'Beacon"', 'Catalyst"'], prefill)
    msgs = speaker_messages(pack.active[0], pack.active, dialogue, None)
    texts = [c.text for c in backend.generate_prefilled([(msgs, stem) for stem in STEMS], GREEDY)]
    systems = [prompt[:backend.system_end(m, prompt)] for m, prompt in
               ((director, backend._prompt(director, prefill)), (msgs, backend._prompt(msgs, GREEDY)))]
    return scores, texts, systems


@pytest.mark.model
def test_a_new_process_restores_the_system_messages_and_answers_alike(tmp_path):
    first, _ = _backend(tmp_path / "none", keep=False)
    ref_scores, ref_texts, _ = _turn(first)
    assert not list((tmp_path / "none").glob("**/*.kv"))
    del first
    writer, wrote = _backend(tmp_path)
    scores, _, systems = _turn(writer)
    files = sorted(tmp_path.glob("*/*.kv"))
    assert len(files) == 2, "one file for the director's scoring context and one for the speaker's batch context"
    # what is on disk is the template's opening and the system message, never the user's words
    stored = [PrefixStore._parse(f.read_bytes())[0] for f in files]
    assert sorted(map(tuple, stored)) == sorted(map(tuple, systems))
    for tokens in stored:
        assert "switch off" not in writer._model.detokenize(tokens, special=True).decode(errors="replace")
    del writer

    reader, read = _backend(tmp_path)
    again, again_texts, _ = _turn(reader)
    assert read["tokens"] <= wrote["tokens"] - sum(len(t) for t in systems) + 2, (read, wrote)
    assert again == pytest.approx(ref_scores, abs=0.02)
    assert again == pytest.approx(scores, abs=0.02)
    # greedy continuations may part at a near-tie (the restored keys were computed in a longer batch), never
    # at a clear choice: where the first words differ, both words score alike after the same stem
    msgs = speaker_messages(load_pack("emotional-support").active[0], load_pack("emotional-support").active,
                            Dialogue([Turn("user", USER)]), None)
    parted = [(stem, a, b) for stem, a, b in zip(STEMS, again_texts, ref_texts) if a.split()[:1] != b.split()[:1]]
    assert len(parted) <= 1, parted
    for stem, a, b in parted:
        near = reader.score(msgs, [" " + a.split()[0], " " + b.split()[0]], GenerationParams(prefill=stem))
        assert abs(near[0] - near[1]) < 0.5, (stem, a, b, near)


@pytest.mark.model
def test_system_end_covers_the_system_message_only():
    from mascot.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend("embedded", n_ctx=1024, n_seq=1)
    pack = load_pack("emotional-support")
    msgs = speaker_messages(pack.active[0], pack.active, Dialogue([Turn("user", USER)]), None)
    prompt = backend._prompt(msgs, GREEDY)
    end = backend.system_end(msgs, prompt)
    head = backend._model.detokenize(prompt[:end], special=True).decode()
    rest = backend._model.detokenize(prompt[end:], special=True).decode()
    assert msgs[0]["content"][:-2] in head and USER not in head and USER in rest
    assert backend.system_end([{"role": "user", "content": USER}], backend._prompt([{"role": "user", "content": USER}], GREEDY)) == 0


@pytest.mark.model
@pytest.mark.parametrize("damage", ["garbage", "state"])
def test_a_damaged_or_refused_file_is_dropped_and_prefilled(tmp_path, caplog, damage):
    writer, _ = _backend(tmp_path)
    scores, _, _ = _turn(writer)
    del writer
    for f in tmp_path.glob("*/*.kv"):
        raw = f.read_bytes()
        if damage == "garbage":
            f.write_bytes(b"not a prefix file")
        else:  # a well-formed header whose state llama.cpp cannot read
            tokens, blob = PrefixStore._parse(raw)
            f.write_bytes(raw[: len(raw) - len(blob)] + b"\x00" * 64)
    reader, read = _backend(tmp_path)
    with caplog.at_level(logging.WARNING):
        again, texts, _ = _turn(reader)
    assert again == pytest.approx(scores, abs=0.02) and all(texts)
    assert "prefilling instead" in caplog.text
    assert read["tokens"] > 300, "the prefixes were prefilled"
    # and written again, valid, for the next start
    assert all(PrefixStore._parse(f.read_bytes())[0] for f in tmp_path.glob("*/*.kv"))


def test_keys_follow_weights_adapter_and_flash_attention(tmp_path):
    store = PrefixStore(tmp_path, ["build"])
    weights, lora_a, lora_b = (tmp_path / n for n in ("w.gguf", "a.gguf", "b.gguf"))
    for f in (weights, lora_a, lora_b):
        f.write_bytes(f.name.encode())
    keys = {store.key(weights, None, None), store.key(weights, str(lora_a), None), store.key(weights, str(lora_b), None),
            store.key(weights, None, True)}
    assert len(keys) == 4
    assert store.key(weights, str(lora_a), None) == PrefixStore(tmp_path, ["build"]).key(weights, str(lora_a), None)
    assert PrefixStore(tmp_path, ["another build"]).root != store.root
    os.utime(lora_a, ns=(1, 1))  # a re-converted adapter file is another key
    assert store.key(weights, str(lora_a), None) not in keys


def test_damaged_headers_parse_as_nothing():
    for raw in (b"", b"MASCOTKV", b"MASCOTKV\x05\x00\x00\x00[1,2", b"MASCOTKV\x03\x00\x00\x00[1]", b"XXXXXXXX\x00\x00\x00\x00"):
        assert PrefixStore._parse(raw) == (None, b"")
    assert PrefixStore._parse(b"MASCOTKV\x03\x00\x00\x00[1]state") == ([1], b"state")


def test_only_the_most_recently_used_files_are_kept_over_all_builds(tmp_path):
    store, old_build = PrefixStore(tmp_path, ["build"]), PrefixStore(tmp_path, ["an older build"])
    store.root.mkdir(parents=True)
    old_build.root.mkdir(parents=True)
    for i in range(MAX_FILES + 5):
        f = (old_build.root if i < 3 else store.root) / f"k{i}.kv"
        f.write_bytes(b"x")
        os.utime(f, ns=(i * 10**9, i * 10**9))
    store._prune()
    kept = sorted(int(p.stem[1:]) for p in tmp_path.glob("*/*.kv"))
    assert kept == list(range(5, MAX_FILES + 5))
    assert not old_build.root.exists(), "an emptied older build's folder goes too"


def test_settings_turn_the_store_on_and_off():
    from mascot.settings import Settings

    assert Settings.from_env({}).backend_options()["keep_prefixes"] is True
    assert Settings.from_env({"MASCOT_LLAMACPP_KEEP_PREFIXES": "0"}).backend_options()["keep_prefixes"] is False


@pytest.mark.model
def test_a_read_only_cache_still_restores_and_never_fails_a_call(tmp_path, monkeypatch, caplog):
    import mascot.backends.llamacpp.prefixes as prefixes

    writer, _ = _backend(tmp_path)
    scores, _, _ = _turn(writer)
    del writer
    good = sorted(tmp_path.glob("*/*.kv"))[0]
    good.write_bytes(b"damaged")  # to be dropped, which a read-only folder refuses

    def refuse(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise PermissionError("read-only file system")

    monkeypatch.setattr(prefixes.os, "utime", refuse)
    monkeypatch.setattr(prefixes.tempfile, "mkstemp", refuse)
    monkeypatch.setattr(Path, "unlink", refuse)
    reader, read = _backend(tmp_path)
    with caplog.at_level(logging.WARNING):
        again, texts, _ = _turn(reader)
    assert again == pytest.approx(scores, abs=0.02) and all(texts)
    assert "was damaged; prefilling instead" in caplog.text
    assert good.read_bytes() == b"damaged", "the folder refused the delete; the file stays, and this process skips it"


@pytest.mark.model
def test_an_unwritable_cache_warns_once_per_prefix_and_answers(tmp_path, monkeypatch, caplog):
    import mascot.backends.llamacpp.prefixes as prefixes

    def refuse(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise PermissionError("read-only file system")

    # what a backend without a store answers, call for call: the second call reuses the first one's prompt in
    # memory, which on quantized weights (q8_0, Q4_1) moves scores by up to about 0.15 through llama.cpp's
    # batch-shape-dependent kernels, so each call is compared with the same call of the reference
    reference, _ = _backend(tmp_path / "none", keep=False)
    expected = [_turn(reference)[0] for _ in range(2)]
    del reference
    monkeypatch.setattr(prefixes.tempfile, "mkstemp", refuse)
    backend, _ = _backend(tmp_path)
    with caplog.at_level(logging.WARNING):
        got = [_turn(backend)[0] for _ in range(2)]
    assert got[0] == pytest.approx(expected[0], abs=0.02) and got[1] == pytest.approx(expected[1], abs=0.02)
    assert caplog.text.count("could not keep a prompt prefix") == 2  # the director's and the speaker's, once each
    assert not list(tmp_path.glob("*/*.kv"))
