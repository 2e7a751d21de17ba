"""The persona reward model r_phi(persona, context, response) and its GRPO reward wrapper.

The same text layout (`rm_prompt` + response + EOS) is used to train the reward model (step 4, TRL
RewardTrainer on `{prompt, chosen, rejected}`) and to score GRPO completions (step 5), so the two
never drift apart. Scores are z-normalised within each GRPO group (paper §7.6).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mascot.group.cleaning import clean_reply
from mascot.group.dialogue import Dialogue
from mascot.group.personas import Persona
from mascot.group.prompts import HISTORY_TURNS
from mascot.rewards.format import cap_words, completion_text, count_words


def rm_prompt(persona: Persona | str, dialogue: Dialogue | str, name: str | None = None) -> str:
    """Reward-model input before the response: persona card, scenario and attributed history.

    `persona` may be a Persona or free text (e.g. pairs exported by the annotation tool, which carry
    no persona); `dialogue` may be a Dialogue or an already rendered context.
    """
    if isinstance(persona, Persona):  # compact card: every scored text carries it, and CPU time is per token
        desc = f"{persona.name} ({persona.role}): {persona.goal}" + (f" Style: {persona.style}" if persona.style else "")
        name = name or persona.name
    else:
        desc, name = persona or "A companion group answering the user together.", name or "the group"
    if isinstance(dialogue, Dialogue):
        scene = f"Situation: {dialogue.situation}\n" if dialogue.situation else ""
        context = scene + (dialogue.transcript(max_turns=HISTORY_TURNS) or "(no messages yet)")
    else:
        context = dialogue
    return f"Persona: {desc}\n\nConversation:\n{context}\n\nNext message from {name}:\n"


def group_zscore(values: Sequence[float], keys: Sequence[Any], eps: float = 1e-6) -> list[float]:
    """Z-score each value within the group of items sharing its key (a group of one, or a group with no
    spread, gets 0.0). NaN values stay NaN and are ignored by their group's statistics.

    >>> group_zscore([1.0, 3.0, 5.0, 5.0], ["a", "a", "b", "b"])
    [-1.0, 1.0, 0.0, 0.0]
    """
    groups: dict[Any, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    out = [math.nan] * len(values)
    for idx in groups.values():
        vals = [values[i] for i in idx if not math.isnan(values[i])]
        if not vals:
            continue
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
        for i in idx:
            if not math.isnan(values[i]):
                out[i] = 0.0 if std < eps else (values[i] - mean) / std
    return out


class PersonaRewardModel:
    """A sequence-classification base model (num_labels=1) with the trained LoRA reward adapter."""

    def __init__(self, model: Any, tokenizer: Any, max_length: int = 1024, batch_size: int = 16) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.max_length, self.batch_size = max_length, batch_size
        self.tokenizer.padding_side = "right"  # the head reads the last non-pad token
        self.tokenizer.truncation_side = "left"  # keep the response when a context is too long
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model.eval()

    @classmethod
    def load(cls, base_model: str, adapter_dir: str | Path, dtype: str = "float32", device: str = "cpu",
             max_length: int = 1024, batch_size: int = 16) -> PersonaRewardModel:
        from peft import PeftModel
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from trl.trainer.reward_trainer import suppress_seqcls_warning

        from mascot.backends.transformers_backend import pick_dtype
        from mascot.files.model_files import resolve_model

        path = resolve_model(base_model)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        with suppress_seqcls_warning():  # the scalar head comes from the adapter (modules_to_save)
            model = AutoModelForSequenceClassification.from_pretrained(
                path, num_labels=1, dtype=pick_dtype(dtype, device), local_files_only=True
            )
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.config.pad_token_id = tokenizer.pad_token_id
        model = PeftModel.from_pretrained(model, str(adapter_dir)).to(device)
        return cls(model, tokenizer, max_length, batch_size)

    def score_texts(self, prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
        """r_phi for each (rm_prompt, response); the text matches what RewardTrainer saw in training."""
        import torch

        eos = self.tokenizer.eos_token or ""
        texts = [p + r + (eos if not r.endswith(eos) else "") for p, r in zip(prompts, responses)]
        scores: list[float] = []
        device = next(self.model.parameters()).device
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            enc = self.tokenizer(chunk, return_tensors="pt", padding=True, truncation=True, max_length=self.max_length)
            with torch.inference_mode():
                logits = self.model(**{k: v.to(device) for k, v in enc.items()}).logits
            scores += [float(x) for x in logits[:, 0].float().cpu()]
        return scores


def make_persona_rm_reward(rm: Any, personas: Sequence[Persona],
                           roster: Sequence[Persona] | None = None, norm: str = "group",
                           max_words: int | None = None,
                           length_slopes: dict[str, tuple[float, float]] | None = None) -> Callable[..., list[float]]:
    """TRL reward `persona_rm(completions, rm_prompt, persona, **kw)`: r_phi z-scored within each group
    (`norm="group"`, the paper's), or standardised by the mean/std of the RM's scores on its training
    replies (`norm="global"`, when the RM records them), which keeps the level of the reward visible in
    the logged curves (a group z-score always averages 0).

    Completions are cleaned with the chat's `clean_reply` first, so the RM scores what a user would see; with
    `max_words`, only their first words (`cap_words`: a length-capped reward, where words past the cap earn nothing).
    `length_slopes` (persona name -> (RM points per word, mean words), measured on the judged candidates): a
    length-controlled RM, slope x (words - mean words) taken off each raw score, so a reply scores no better or
    worse for being longer than that persona's candidates were on average.
    The raw (unnormalised) mean is logged as `persona_rm/raw_mean` when TRL provides `log_metric`.
    """
    by_name = {p.name: p for p in personas}
    roster = list(roster or personas)

    def persona_rm(completions: list[Any], rm_prompt: list[str], persona: list[str] | None = None,
                   log_metric: Callable[[str, float], None] | None = None, **kwargs: Any) -> list[float]:
        texts = [completion_text(c) for c in completions]
        if persona is not None:
            texts = [clean_reply(t, by_name[p], roster) if p in by_name else t for t, p in zip(texts, persona)]
        if max_words:
            texts = [cap_words(t, max_words) for t in texts]
        raw = rm.score_texts(rm_prompt, texts)
        if log_metric is not None and raw:
            log_metric("persona_rm/raw_mean", sum(raw) / len(raw))
        if length_slopes and persona is not None:
            raw = [r - length_slopes[p][0] * (count_words(t) - length_slopes[p][1]) if p in length_slopes else r
                   for r, t, p in zip(raw, texts, persona)]
        meta = getattr(rm, "meta", None) or {}
        if norm == "global" and meta.get("score_std"):
            return [(r - meta["score_mean"]) / meta["score_std"] for r in raw]
        return group_zscore(raw, rm_prompt)

    return persona_rm
