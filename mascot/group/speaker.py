"""Speakers: a persona replies to the shared history under the director's instruction, through its
own LoRA adapter when one is loaded; the reply is cleaned (mascot.group.cleaning) into one in-character
message, and a draw that is meta talk, a fragment or a copy of an earlier turn is drawn again."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Protocol

from mascot.backends.base import Backend, GenerationParams
from mascot.errors import InputError
from mascot.group.cleaning import (
    META_REDRAWS,
    MIN_REPLY_WORDS,
    clean_reply,
    copying_so_far,
    count_words,
    cut_meta_talk,
    earlier_turns,
    finalize_reply,
    finish_sentence,
    might_open_meta,
    repeats_turn,
)
from mascot.group.dialogue import Dialogue, Directive
from mascot.group.personas import Persona
from mascot.group.prompts import speaker_messages


def adapter_name(persona: Persona) -> str:
    """The backend adapter name used for a persona's LoRA."""
    return f"speaker-{persona.key}"


class Selector(Protocol):
    """Chooses one of several finished draws for a persona turn (mascot.acceptability.selection.Selector)."""

    def choose(self, dialogue: Dialogue, persona: Persona, texts: list[str]) -> Choice: ...


@dataclass
class Choice:
    """Which draw a selector kept, and what the turn's metadata records about it."""

    index: int
    info: dict[str, object] = field(default_factory=dict)


MAX_BEST_OF = 8


def check_best_of(n: int) -> int:
    """`best_of` as given, or a clear error with the range."""
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_BEST_OF:
        raise InputError(f"best_of must be a whole number from 1 to {MAX_BEST_OF} (got {n!r}): 1 shows the first draw, "
                         "N draws N replies at once and shows the one the acceptability scorer rates best.")
    return n


class Speaker:
    """Generates persona replies through one shared backend (adapter switched per persona).

    With `stems`, a reply starts from opening words of its persona (`Persona.stems`, one per seed) prefilled for
    the model. With `best_of` N > 1 and a `selector`, N draws of the same prompt are made in batched backend calls
    (draw j starts from the stem of seed + j, so the selector also chooses the opening that fits the user's
    feeling; draws with the same stem share one call and its prefill) and the selector's choice is shown."""

    def __init__(
        self,
        backend: Backend,
        params: GenerationParams | None = None,
        style: str = "persona",
        use_adapters: bool = True,
        stems: bool = False,
        best_of: int = 1,
        selector: Selector | None = None,
        adapter_names: dict[str, str] | None = None,
    ) -> None:
        self.backend = backend
        # persona key -> backend adapter name, for a conversation pinned to a live run's version (Engine.put_live)
        self.adapter_names = dict(adapter_names or {})
        self.params = params or GenerationParams(
            max_new_tokens=64, temperature=0.6, top_p=0.9, repetition_penalty=1.1, stop=("\n\n", "\nUser:")
        )
        self.style = style
        self.use_adapters = use_adapters
        self.stems = stems
        self.best_of = check_best_of(best_of)
        self.selector = selector

    @property
    def selecting(self) -> bool:
        return self.best_of > 1 and self.selector is not None

    def adapter_for(self, persona: Persona) -> str | None:
        name = self.adapter_names.get(persona.key) or adapter_name(persona)
        return name if self.use_adapters and name in self.backend.adapters else None

    def messages(self, persona: Persona, roster: list[Persona], dialogue: Dialogue, directive: Directive | None):
        return speaker_messages(persona, roster, dialogue, directive, style=self.style)

    def stem_for(self, persona: Persona, seed: int | None, dialogue: Dialogue) -> str:
        return persona.stem(seed, dialogue.last_user_text()) if self.stems else ""

    def stream(
        self, persona: Persona, roster: list[Persona], dialogue: Dialogue, directive: Directive | None,
        seed: int | None = None, info: dict[str, object] | None = None,
    ) -> Iterator[str]:
        """Yield the cleaned reply so far after each streamed chunk (the last value is final).

        Meta talk never reaches the user: an opening that could become meta talk is held back until decided; a
        reply that is meta talk from its first sentence, shorter than `MIN_REPLY_WORDS` words, or a copy of an
        earlier turn (`REPEAT_RATIO`) is drawn again with another seed (`META_REDRAWS`; the best draw is kept);
        one that turns to meta talk later ends before that sentence. A reply is held back while it could still be
        meta talk or a copy of an earlier turn. With selection on, the chosen draw is shown word by word and
        `info` receives what the selector recorded."""
        if self.selecting:
            yield from self._stream_selected(persona, roster, dialogue, directive, seed, info)
            return
        msgs = self.messages(persona, roster, dialogue, directive)
        earlier = earlier_turns(dialogue)
        stem = self.stem_for(persona, seed, dialogue)
        best, best_rank = "", _draw_rank("", earlier)
        for attempt in range(META_REDRAWS + 1):
            raw, text, shown = "", "", False
            with closing(self.backend.stream(msgs, self.params.with_(seed=_redraw_seed(seed, attempt), prefill=stem),
                                             adapter=self.adapter_for(persona))) as deltas:
                for delta in deltas:
                    raw += delta
                    text = clean_reply(join_stem(stem, raw), persona, roster, finish=False)
                    if cut_meta_talk(text) != text:
                        break
                    # held back until it has MIN_REPLY_WORDS words (the safety guard shows nothing before four
                    # words anyway) and can no longer turn into meta talk or a copy of an earlier turn
                    if shown or (count_words(text) >= MIN_REPLY_WORDS and not might_open_meta(text)
                                 and not copying_so_far(text, earlier)):
                        shown = True
                        yield text
                else:  # the final text ends at a sentence boundary
                    text = clean_reply(join_stem(stem, raw), persona, roster)
            kept = finish_sentence(cut_meta_talk(text))
            rank = _draw_rank(kept, earlier)
            if shown or rank > best_rank:
                best, best_rank = kept, rank
            if shown or rank[0] or attempt == META_REDRAWS:
                yield best
                return

    def _stream_selected(self, persona: Persona, roster: list[Persona], dialogue: Dialogue,
                         directive: Directive | None, seed: int | None, info: dict[str, object] | None) -> Iterator[str]:
        chosen = self.select_batch([(persona, roster, dialogue, directive)], seed, infos=[info] if info is not None else None)[0]
        words = chosen.split(" ")
        for k in range(1, len(words) + 1):  # the chosen draw is shown as it would have streamed
            yield " ".join(words[:k])

    def select_batch(
        self,
        items: list[tuple[Persona, list[Persona], Dialogue, Directive | None]],
        seed: int | None = None,
        params: GenerationParams | None = None,
        infos: list[dict[str, object] | None] | None = None,
    ) -> list[str]:
        """`best_of` draws per item in batched calls (one per adapter), each item's best by the selector;
        draw j of an item starts from the persona's stem for seed + j."""
        n = self.best_of
        expanded = [item for item in items for _ in range(n)]
        drawn = self.draw_batch(expanded, seed, params, redraw=False, stem_offsets=list(range(n)) * len(items))
        out = []
        for k, (persona, _roster, dialogue, _d) in enumerate(items):
            texts = drawn[k * n:(k + 1) * n]
            choice = self.selector.choose(dialogue, persona, texts)  # type: ignore[union-attr]
            out.append(texts[choice.index])
            if infos is not None and infos[k] is not None:
                infos[k].update(choice.info)  # type: ignore[union-attr]
        return out

    def reply_batch(
        self,
        items: list[tuple[Persona, list[Persona], Dialogue, Directive | None]],
        seed: int | None = None,
        params: GenerationParams | None = None,
        infos: list[dict[str, object] | None] | None = None,
    ) -> list[str]:
        """Batched replies, one backend call per adapter (used by rollouts and evaluation); with
        selection on, `best_of` draws per item and the selector's choice, as `stream` shows it."""
        if self.selecting:
            return self.select_batch(items, seed, params, infos)
        return self.draw_batch(items, seed, params, redraw=True)

    def draw_batch(self, items: list[tuple[Persona, list[Persona], Dialogue, Directive | None]], seed: int | None,
                   params: GenerationParams | None = None, redraw: bool = True,
                   stem_offsets: list[int] | None = None) -> list[str]:
        """One draw per item, no selection: one backend call per adapter (`generate_prefilled`). Item i starts from the
        persona's stem for seed + `stem_offsets[i]` (default 0); with `redraw`, a draw that opens with meta talk,
        is a fragment or copies an earlier turn is drawn again, up to META_REDRAWS times (as `stream` does)."""
        params = (params or self.params).with_(seed=seed)
        offsets = stem_offsets or [0] * len(items)
        stem = [self.stem_for(persona, (seed or 0) + k, dialogue)  # stem(None) is stem(0)
                for (persona, _roster, dialogue, _d), k in zip(items, offsets)]
        out: list[str] = [""] * len(items)
        groups: dict[str | None, list[int]] = {}
        for i, (persona, *_rest) in enumerate(items):
            groups.setdefault(self.adapter_for(persona), []).append(i)
        earlier = [earlier_turns(dialogue) for _, _, dialogue, _ in items]
        ranks: list[tuple[bool, bool, bool, int]] = [_draw_rank("", e) for e in earlier]
        for adapter, idx in groups.items():
            # as in `stream`: meta talk from the start, a fragment or a copy of an earlier turn is drawn again
            for attempt in range(META_REDRAWS + 1 if redraw else 1):
                chats = [(self.messages(*items[i]), stem[i]) for i in idx]  # each draw from its own stem, one call
                redo = []
                for i, c in zip(idx, self.backend.generate_prefilled(
                        chats, params.with_(seed=_redraw_seed(seed, attempt)), adapter=adapter)):
                    kept = finalize_reply(join_stem(stem[i], c.text), items[i][0], items[i][1])
                    rank = _draw_rank(kept, earlier[i])
                    if attempt == 0 or rank > ranks[i]:
                        out[i], ranks[i] = kept, rank
                    if not ranks[i][0]:  # not acceptable yet
                        redo.append(i)
                idx = redo
                if not idx:
                    break
        return out


def join_stem(stem: str, text: str) -> str:
    """The prefilled opening words and the model's continuation as one reply (a space between words)."""
    if stem and text and not text[0].isspace() and text[0] not in ".,!?;:'’" and stem[-1].isalnum():
        return f"{stem} {text}"
    return stem + text


def _draw_rank(text: str, earlier: list[list[str]]) -> tuple[bool, bool, bool, int]:
    """Which of several draws to keep, as a sortable tuple: an acceptable one first (at least MIN_REPLY_WORDS words
    and no copy of an earlier turn: no redraw needed; element 0), then one of MIN_REPLY_WORDS words or more (a copy
    beats an empty reply or a fragment), then one that copies nothing, then the longest."""
    n, copy = count_words(text), repeats_turn(text, earlier)
    return n >= MIN_REPLY_WORDS and not copy, n >= MIN_REPLY_WORDS, not copy, n


def _redraw_seed(seed: int | None, attempt: int) -> int | None:
    """The seed of a redraw: the caller's for the first draw, then fixed offsets from it (None stays random)."""
    return seed if seed is None or attempt == 0 else seed + 7919 * attempt
