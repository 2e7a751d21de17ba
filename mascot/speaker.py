"""Speakers: a persona replies to the shared history under the director's instruction, through its
own LoRA adapter when one is loaded, and the reply is cleaned into one in-character message."""

from __future__ import annotations

import re
from collections.abc import Iterator

from mascot.backends.base import Backend, GenerationParams
from mascot.dialogue import Dialogue, Directive
from mascot.personas import Persona
from mascot.prompts import speaker_messages, strip_reasoning

MAX_REPLY_CHARS = 600
META_PATTERNS = (r"\bas an ai\b", r"\bas a language model\b", r"\bi am an ai\b", r"\bi'm an ai\b")


def adapter_name(persona: Persona) -> str:
    """The backend adapter name used for a persona's LoRA."""
    return f"speaker-{persona.key}"


def _tag_pattern(names: list[str]) -> str:
    alts = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True) if n)
    return rf"(?:\*\*|__)?(?:{alts})(?:\s*\([^)]*\))?(?:\*\*|__)?\s*:(?:\*\*)?"


def clean_reply(text: str, persona: Persona, roster: list[Persona], max_chars: int = MAX_REPLY_CHARS) -> str:
    """Make raw model output one in-character message: drop reasoning and leading speaker tags,
    cut where it starts speaking as someone else, and bound the length at a sentence end."""
    text = strip_reasoning(text)
    own = [persona.name, persona.role, *persona.aliases, "Assistant"]
    text = re.sub(rf"^\s*{_tag_pattern(own)}\s*", "", text, flags=re.I)
    others = [n for p in roster if p.name != persona.name for n in (p.name, *p.aliases)] + ["User", "Director", "Assistant"]
    m = re.search(rf"(?:^|\n|(?<=[.!?]) )\s*{_tag_pattern(others)}", text, flags=re.I)
    if m:
        text = text[: m.start()]
    text = re.sub(rf"\n\s*{_tag_pattern(own)}\s*", " ", text, flags=re.I)  # a repeated own tag mid-text
    text = text.strip().split("\n", 1)[0] if "\n" in text.strip() else text  # one message = one paragraph
    text = re.sub(r"\s+", " ", text).strip().strip('"').strip()
    if len(text) > max_chars:
        cut = text[:max_chars]
        end = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "), cut.rfind(".\n"))
        text = cut[: end + 1] if end > max_chars // 3 else cut.rstrip() + "…"
    return text


def has_meta_talk(text: str) -> bool:
    """True if the text breaks character with assistant meta-talk ("As an AI ...")."""
    return any(re.search(p, text, flags=re.I) for p in META_PATTERNS)


class Speaker:
    """Generates persona replies through one shared backend (adapter switched per persona)."""

    def __init__(
        self,
        backend: Backend,
        params: GenerationParams | None = None,
        style: str = "persona",
        use_adapters: bool = True,
    ) -> None:
        self.backend = backend
        self.params = params or GenerationParams(
            max_new_tokens=64, temperature=0.6, top_p=0.9, repetition_penalty=1.1, stop=("\n\n", "\nUser:")
        )
        self.style = style
        self.use_adapters = use_adapters

    def adapter_for(self, persona: Persona) -> str | None:
        name = adapter_name(persona)
        return name if self.use_adapters and name in self.backend.adapters else None

    def messages(self, persona: Persona, roster: list[Persona], dialogue: Dialogue, directive: Directive | None):
        return speaker_messages(persona, roster, dialogue, directive, style=self.style)

    def stream(
        self, persona: Persona, roster: list[Persona], dialogue: Dialogue, directive: Directive | None, seed: int | None = None
    ) -> Iterator[str]:
        """Yield the cleaned reply so far after each streamed chunk (the last value is final)."""
        msgs = self.messages(persona, roster, dialogue, directive)
        raw = ""
        for delta in self.backend.stream(msgs, self.params.with_(seed=seed), adapter=self.adapter_for(persona)):
            raw += delta
            yield clean_reply(raw, persona, roster)

    def reply_batch(
        self,
        items: list[tuple[Persona, list[Persona], Dialogue, Directive | None]],
        seed: int | None = None,
        params: GenerationParams | None = None,
    ) -> list[str]:
        """Batched replies, one backend call per adapter group (used by rollouts and evaluation)."""
        params = (params or self.params).with_(seed=seed)
        out: list[str] = [""] * len(items)
        groups: dict[str | None, list[int]] = {}
        for i, (persona, *_rest) in enumerate(items):
            groups.setdefault(self.adapter_for(persona), []).append(i)
        for adapter, idx in groups.items():
            chats = [self.messages(*items[i]) for i in idx]
            for i, c in zip(idx, self.backend.generate(chats, params, adapter=adapter)):
                out[i] = clean_reply(c.text, items[i][0], items[i][1])
        return out
