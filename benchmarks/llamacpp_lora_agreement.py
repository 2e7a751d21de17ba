"""How closely the project's PEFT -> GGUF LoRA converter reproduces peft (issue 8, correctness).

For each shipped tiny-cpu speaker adapter and for random-initialised LoRAs (all projections; q/k only),
the logit change (adapter minus base) on a fixed prompt under transformers+peft (float32) is correlated
with the change under llama.cpp with the converted adapter (Q4_1 base). Weak adapters are limited by
llama.cpp's quantisation noise (about 0.2 std on the logit change), so each shipped adapter is also measured
with its effect scaled x4 (`scaled_adapter`). The q/k-only LoRA is also
converted without the llama.cpp q/k head permutation, to show what the permutation is for.

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/llamacpp_lora_agreement.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from unittest import mock

import mascot.backends.llamacpp_lora as conv
from mascot.backends.llamacpp import LlamaCppBackend
from mascot.backends.llamacpp_check import load_hf_base, logit_change_correlation, random_lora, scaled_adapter

SPEAKERS = Path(__file__).resolve().parents[1] / "checkpoints" / "tiny-cpu" / "speakers"
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def main() -> None:
    llm = LlamaCppBackend("embedded", n_ctx=1024, n_seq=1)
    hf = load_hf_base()
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for d in sorted(SPEAKERS.iterdir()):
            rows.append((f"tiny-cpu {d.name}", logit_change_correlation(llm, hf, d, d.name)))
            strong = scaled_adapter(d, Path(tmp) / f"{d.name}-x4", 4.0)
            rows.append((f"tiny-cpu {d.name}, effect x4 (lora_alpha x4)", logit_change_correlation(llm, hf, strong, f"{d.name}-x4")))
        every = random_lora(hf, Path(tmp) / "all", ALL, seed=0)
        qk = random_lora(hf, Path(tmp) / "qk", ["q_proj", "k_proj"], seed=1)
        rows.append(("random LoRA, all projections", logit_change_correlation(llm, hf, every, "all")))
        rows.append(("random LoRA, q/k only", logit_change_correlation(llm, hf, qk, "qk")))
        with mock.patch.object(conv, "permute_rows", lambda w, n_head: w):
            bad = conv.convert_lora(qk, llm.shape, out_dir=Path(tmp) / "noperm")
        rows.append(("random LoRA, q/k only, WITHOUT the permutation", logit_change_correlation(llm, hf, bad, "bad", peft_dir=qk)))
    print("| adapter | logit-change correlation (peft vs llama.cpp) |\n|---|---|")
    for name, r in rows:
        print(f"| {name} | {r:.4f} |")


if __name__ == "__main__":
    main()
