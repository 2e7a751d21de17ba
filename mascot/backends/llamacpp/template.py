"""The llamacpp backend's prompts: the GGUF's own chat template, rendered in a sandbox and tokenized."""

from __future__ import annotations

from typing import Any

from mascot.backends.base import GenerationParams, Messages
from mascot.backends.llamacpp.contexts import common_prefix
from mascot.errors import BackendError


class ChatTemplate:
    """`LlamaCppBackend`'s chat template (`template`, read from the GGUF's metadata) and tokenizer (`_model`)."""

    def _jinja_env(self) -> Any:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise BackendError(f"The chat template of {self.source} rejected the messages: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.template)

    def render(self, messages: Messages, prefill: str = "") -> str:
        """The GGUF's own chat template (each persona's system message included), plus the prefill."""
        tok = self._model
        return self._env.render(messages=messages, add_generation_prompt=True,
                                bos_token=tok.token_get_text(tok.token_bos()) if tok.token_bos() >= 0 else "",
                                eos_token=tok.token_get_text(tok.token_eos()) if tok.token_eos() >= 0 else "") + prefill

    def tokenize(self, text: str) -> list[int]:
        """The text's tokens, special tokens parsed, no BOS added (the template writes its own)."""
        return self._model.tokenize(text.encode(), add_bos=False, special=True)

    def _prompt(self, messages: Messages, params: GenerationParams, text: str | None = None) -> list[int]:
        """The chat's tokens (`text`: the chat already rendered with the prefill), checked against the context."""
        tokens = self.tokenize(self.render(messages, params.prefill) if text is None else text)
        room = self.n_ctx_seq - params.max_new_tokens
        if len(tokens) > room:
            raise BackendError(f"The prompt is {len(tokens)} tokens; with {params.max_new_tokens} new tokens it exceeds "
                               f"the llamacpp context of {self.n_ctx_seq} tokens per sequence. Shorten the dialogue or "
                               "raise n_ctx.")
        return tokens

    def system_end(self, messages: Messages, prompt: list[int]) -> int:
        """How many leading tokens of `prompt` (rendered from `messages`) hold nothing but the template's opening
        and the system message: the part that may be kept on disk (prefixes.py), since no user text is in it."""
        system = messages[0].get("content", "") if messages and messages[0].get("role") == "system" else ""
        text = self.render(messages) if system else ""
        end = text.find(system) if system else -1
        if end < 0:
            return 0
        # one token short: the system message's last token may merge with what follows it
        return max(0, common_prefix(prompt, self.tokenize(text[:end + len(system)])) - 1)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))
