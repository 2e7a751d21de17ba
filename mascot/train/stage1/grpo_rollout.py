"""GRPO completions sampled on llama.cpp with the policy's current LoRA (`grpo_rollouts: llamacpp`).

TRL's own generation runs the policy through `transformers.generate`, which on a CPU spends most of each decode
step in Python: on 2 cores it took 40 % of a GRPO step (py-spy). llama.cpp samples the same completions about four
times faster (`benchmarks/grpo_step.py --rollouts llamacpp`). So at every optimizer step the adapter being
trained is written as a PEFT folder, converted to a GGUF LoRA (`mascot.backends.llamacpp.lora`, the converter
the chat uses), loaded against the base model's full-precision weights (`f32`: the same numbers the trainer
computes with, so the completions come from the policy being trained, not from a quantised copy) and the previous
step's adapter is dropped. TRL then scores the sampled tokens with the policy itself, as it does for its own
completions (`rollout_func`); the sampler follows TRL's settings (temperature, top-p, top-k, repetition penalty,
token budget). The prompts are the GGUF chat template's tokens, which are the tokenizer's (checked at start).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mascot.backends.base import GenerationParams
from mascot.errors import ConfigError
from mascot.train.stage1.config import Stage1Config

log = logging.getLogger(__name__)


class LlamaCppRollout:
    """A TRL `rollout_func`: `rollout(prompts, trainer) -> {prompt_ids, completion_ids, logprobs}`.

    `prompts` are the trainer's chat prompts for this step, one entry per completion (TRL repeats each prompt
    `num_generations` times), and one completion comes back per entry, in order."""

    def __init__(self, model: str, tokenizer: Any, *, max_new_tokens: int, temperature: float, top_p: float,
                 top_k: int, repetition_penalty: float, seed: int, threads: int = 1, weights: str = "f32",
                 eos_token_ids: list[int] | None = None) -> None:
        from mascot.backends.llamacpp.backend import LlamaCppBackend

        self.backend = LlamaCppBackend(model=model, n_seq=1, threads=threads, weights=weights, decode_weights="same")
        self.params = GenerationParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                       top_k=top_k or 0, repetition_penalty=repetition_penalty)
        self.seed = seed
        self.tokenizer = tokenizer
        self.eos = list(eos_token_ids if eos_token_ids is not None else [tokenizer.eos_token_id])
        self.adapter: str | None = None
        self.synced_step: int | None = None
        self.calls = 0
        self._tmp = tempfile.TemporaryDirectory(prefix="mascot-rollout-")
        self._checked_template = False

    # ------------------------------------------------------------------ weights
    def sync(self, policy: Any, step: int) -> None:
        """Load the policy's current LoRA into llama.cpp as adapter `policy-<step>` and drop the previous one."""
        from mascot.backends.llamacpp.lora import convert_lora

        folder = Path(self._tmp.name) / f"step-{step}"
        policy.save_pretrained(str(folder), safe_serialization=True)
        if self.backend.shape is None:
            raise ConfigError(f"grpo_rollouts: llamacpp needs a LoRA llama.cpp can load: {self.backend.shape_error}")
        gguf_path = convert_lora(folder, self.backend.shape, out_dir=folder)
        name = f"policy-{step}"
        self.backend.add_adapter(name, str(gguf_path))
        if self.adapter is not None:
            self.backend.remove_adapter(self.adapter)
        self.adapter, self.synced_step = name, step
        previous = Path(self._tmp.name) / f"step-{step - 1}"
        if previous.exists():
            shutil.rmtree(previous, ignore_errors=True)

    def _check_template(self, messages: list[dict[str, str]], tokens: list[int]) -> None:
        """The GGUF's chat template must give the tokenizer's tokens, or the trainer would score other prompts."""
        ours = self.tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
        ours = list(ours["input_ids"] if hasattr(ours, "keys") else ours)
        if ours != tokens:
            n = next((i for i, (a, b) in enumerate(zip(ours, tokens)) if a != b), min(len(ours), len(tokens)))
            raise ConfigError("grpo_rollouts: llamacpp: the GGUF's chat template and the tokenizer's give different "
                              f"prompt tokens (first difference at token {n} of {len(tokens)}); use "
                              "grpo_rollouts: trainer for this model.")
        self._checked_template = True

    # ------------------------------------------------------------------ rollout
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        step = int(trainer.state.global_step)
        if step != self.synced_step:
            self.sync(trainer.accelerator.unwrap_model(trainer.model), step)
        messages = [p if isinstance(p, list) else [{"role": "user", "content": str(p)}] for p in prompts]
        prompt_ids = [self.backend._prompt(m, self.params) for m in messages]
        if not self._checked_template:
            self._check_template(messages[0], prompt_ids[0])
        # a seed per step and completion: reproducible runs, a fresh sample for every completion
        params = self.params.with_(seed=(self.seed * 1_000_003 + self.calls * 10_007) & 0x7FFFFFFF)
        self.calls += 1
        outs = self.backend.generate(messages, params, adapter=self.adapter)
        completion_ids = []
        for o in outs:
            ids = list(o.token_ids)
            if o.finish_reason == "stop" and ids and ids[-1] not in self.eos:
                ids[-1] = self.eos[0]  # another end-of-generation token (<|endoftext|>): TRL knows only its own
            completion_ids.append(ids)
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}

    def close(self) -> None:
        if self.adapter is not None:
            self.backend.remove_adapter(self.adapter)
            self.adapter = None
        self._tmp.cleanup()


def make_rollout(cfg: Stage1Config, tokenizer: Any, args: Any) -> LlamaCppRollout | None:
    """The rollout function for `cfg.grpo_rollouts` (None: TRL generates itself), sampling as GRPOConfig `args` says.
    The name itself is checked where the config is built (`Stage1Config`, against ROLLOUT_KINDS)."""
    if cfg.grpo_rollouts == "trainer":
        return None
    if getattr(args, "use_vllm", False):
        raise ConfigError("grpo_rollouts: llamacpp and grpo.use_vllm both generate GRPO's completions: choose one.")
    if getattr(args, "min_p", None) is not None:
        raise ConfigError(f"grpo_rollouts: llamacpp samples without min-p; grpo.min_p={args.min_p} would be ignored. "
                          "Drop it or use grpo_rollouts: trainer.")
    if getattr(args, "generation_kwargs", None):
        raise ConfigError(f"grpo_rollouts: llamacpp follows GRPOConfig's sampling fields only; grpo.generation_kwargs "
                          f"({args.generation_kwargs}) would be ignored. Drop them or use grpo_rollouts: trainer.")
    return LlamaCppRollout(cfg.model, tokenizer, max_new_tokens=args.max_completion_length,
                           temperature=args.temperature, top_p=args.top_p, top_k=args.top_k or 0,
                           repetition_penalty=args.repetition_penalty, seed=args.seed,
                           threads=cfg.torch_threads or 1)
