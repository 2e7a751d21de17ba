"""The optional fourth layer of the crisis detector: a short classification prompt to a capable model that may
upgrade a gray-zone *concern* to *crisis*. Off by default; only for the `openai` and `vllm` backends (the
embedded model is too small to be trusted with it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mascot.backends.base import Backend

JUDGE_BACKENDS = ("openai", "vllm")


class LLMGrayZoneJudge:
    """Asks `backend` whether the user's recent messages show current risk (one word: CRISIS or SAFE)."""

    PROMPT = ("You screen messages sent to an emotional-support chat for suicide and self-harm risk. Read the user's "
              "recent messages and answer with exactly one word: CRISIS if the writer expresses current intent, a plan, "
              "access to means, a farewell, self-harm, or asks for lethal information about themselves; otherwise SAFE.")

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def confirms_crisis(self, turns: Sequence[str]) -> bool:
        from mascot.backends.base import GenerationParams

        user = "\n".join(f"User: {t}" for t in turns)
        messages = [{"role": "system", "content": self.PROMPT}, {"role": "user", "content": user}]
        out = self.backend.generate([messages], GenerationParams(max_new_tokens=4, temperature=0.0))[0].text
        return out.strip().upper().startswith("CRISIS")


def make_gray_zone_judge(backend: Backend | None, enabled: bool) -> LLMGrayZoneJudge | None:
    """The LLM judge over `backend` when `enabled` (`Settings.safety_llm_judge`) and the backend is an `openai` or
    `vllm` one; else None (the detector then decides without it)."""
    if enabled and backend is not None and backend.kind in JUDGE_BACKENDS:
        return LLMGrayZoneJudge(backend)
    return None
