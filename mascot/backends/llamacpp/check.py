"""Does a converted GGUF LoRA change llama.cpp's logits the way peft changes transformers' logits?

Used by tests/test_llamacpp.py and benchmarks/llamacpp_lora_agreement.py: on one fixed prompt, the
logit change (adapter minus base) at every position under transformers+peft is correlated with the
change under llama.cpp with the converted adapter, on the same token ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mascot.backends.base import GenerationParams, Messages
from mascot.backends.llamacpp.backend import LlamaCppBackend

PROMPT: Messages = [{"role": "system", "content": "You are Anchor, a calm and steady friend."},
                    {"role": "user", "content": "I failed my driving test again and I feel stupid."}]
_GREEDY = GenerationParams(max_new_tokens=0, temperature=0.0)


def load_hf_base() -> Any:
    """The embedded model under transformers in float32 (the reference side)."""
    import torch
    from transformers import AutoModelForCausalLM

    from mascot.files.model_files import embedded_model_dir

    return AutoModelForCausalLM.from_pretrained(embedded_model_dir(progress=False), dtype=torch.float32).eval()


def random_lora(hf_model: Any, out: Path, targets: list[str], seed: int, std: float = 0.08) -> Path:
    """A random-initialised PEFT LoRA (nonzero A and B, r=8, alpha=16) on `hf_model`, saved to `out`."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    peft = get_peft_model(hf_model, LoraConfig(r=8, lora_alpha=16, target_modules=targets, init_lora_weights=False))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_" in name:
                p.normal_(0, std)
    peft.save_pretrained(out)
    peft.unload()  # leaves `hf_model` as the plain base again
    return out


def scaled_adapter(src: Path, out: Path, factor: float) -> Path:
    """A copy of the PEFT folder `src` whose effect is `factor` times larger (lora_alpha scaled, weights kept).

    Why: llama.cpp runs the Q4_1 base with 8-bit activations, which adds noise of about 0.2 (std) to any
    logit change. A weakly trained adapter (the shipped tiny-cpu speakers change logits by about 0.35)
    is then measured against that floor rather than against the converter; scaling its effect tests the
    same tensors, names and permutation at a signal-to-noise ratio where a wrong mapping would show."""
    import json
    import shutil

    shutil.copytree(src, out, dirs_exist_ok=True)
    cfg_path = out / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["lora_alpha"] = cfg["lora_alpha"] * factor
    cfg_path.write_text(json.dumps(cfg), encoding="utf-8")
    return out


def hf_delta(hf_model: Any, adapter_dir: Path, tokens: list[int]) -> np.ndarray:
    """transformers+peft logits minus base logits at every position of `tokens`."""
    import torch
    from peft import PeftModel

    ids = torch.tensor([tokens])
    with torch.inference_mode():
        base = hf_model(ids).logits[0].float().numpy()
        peft = PeftModel.from_pretrained(hf_model, str(adapter_dir))
        tuned = peft(ids).logits[0].float().numpy()
        peft.unload()
    return tuned - base


def llama_delta(llm: LlamaCppBackend, adapter: Path, name: str, messages: Messages = PROMPT) -> np.ndarray:
    """llama.cpp logits with the (converted) adapter minus base logits, on the prompt of `messages`."""
    if name not in llm.adapters:
        llm.add_adapter(name, str(adapter))
    return llm.logits(messages, _GREEDY, adapter=name) - llm.logits(messages, _GREEDY)


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


def logit_change_correlation(llm: LlamaCppBackend, hf_model: Any, adapter: Path, name: str,
                             peft_dir: Path | None = None, messages: Messages = PROMPT) -> float:
    """Correlation of the two logit changes; `adapter` may be a PEFT folder or an already converted .gguf
    (then `peft_dir` is the PEFT folder it came from)."""
    tokens = llm.tokenize(llm.render(messages))
    return correlation(hf_delta(hf_model, peft_dir or adapter, tokens), llama_delta(llm, adapter, name, messages))
