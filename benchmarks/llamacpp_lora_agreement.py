"""How closely the project's PEFT -> GGUF LoRA converter reproduces peft.

For each shipped tiny-cpu adapter (the three speakers and the director) and for random-initialised LoRAs
(all projections; q/k only), the logit change (adapter minus base) on a fixed prompt under transformers+peft
(float32) is correlated with the change under llama.cpp with the converted adapter. Three llama.cpp weight
formats of the same model:
- `f32`: the embedded model's exact de-quantised values (what transformers computes with), so llama.cpp
  and peft differ only by the converter and arithmetic order: this isolates the converter;
- `q8_0` (the backend's default on CPUs without AVX512-BF16) and `native` (the Q4_1 file as served): llama.cpp's quantised kernels also
  round the activations to 8 bits, a noise of about 0.2 std on the logit change, which weak adapters sit near.
Each shipped adapter is also measured with its effect scaled x4 (`scaled_adapter`), and the q/k-only LoRA is
converted without the llama.cpp q/k head permutation, to show what the permutation is for.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/llamacpp_lora_agreement.py [--weights f32,q8_0,native]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from unittest import mock

import mascot.backends.llamacpp.lora as conv
from mascot.backends.llamacpp import LlamaCppBackend
from mascot.backends.llamacpp.check import load_hf_base, logit_change_correlation, random_lora, scaled_adapter

RUN = Path(__file__).resolve().parents[1] / "checkpoints" / "tiny-cpu"
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def shipped() -> list[tuple[str, Path]]:
    out = [(f"speaker {d.name}", d) for d in sorted((RUN / "speakers").iterdir()) if (d / "adapter_config.json").exists()]
    if (RUN / "director" / "adapter_config.json").exists():
        out.append(("director", RUN / "director"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", default="f32,q8_0,native")
    args = ap.parse_args()
    from mascot.files.model_files import use_cache_dir
    from mascot.settings import Settings, apply_process_defaults

    settings = Settings.from_env()
    apply_process_defaults()
    use_cache_dir(settings.cache_dir)  # the converted LoRAs, the re-encoded weights and the transformers copy
    hf = load_hf_base()
    formats = [w.strip() for w in args.weights.split(",") if w.strip()]
    table: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        every = random_lora(hf, Path(tmp) / "all", ALL, seed=0)
        qk = random_lora(hf, Path(tmp) / "qk", ["q_proj", "k_proj"], seed=1)
        for weights in formats:
            llm = LlamaCppBackend("embedded", n_ctx=1024, n_seq=1, weights=weights)

            def put(row: str, value: float, weights: str = weights) -> None:
                table.setdefault(row, {})[weights] = value

            for name, d in shipped():
                put(f"tiny-cpu {name}", logit_change_correlation(llm, hf, d, f"{weights}-{d.name}"))
                strong = scaled_adapter(d, Path(tmp) / f"{weights}-{d.name}-x4", 4.0)
                put(f"tiny-cpu {name}, effect x4", logit_change_correlation(llm, hf, strong, f"{weights}-{d.name}-x4"))
            put("random LoRA, all projections", logit_change_correlation(llm, hf, every, f"{weights}-all"))
            put("random LoRA, q/k only", logit_change_correlation(llm, hf, qk, f"{weights}-qk"))
            with mock.patch.object(conv, "permute_rows", lambda w, n_head: w):
                bad = conv.convert_lora(qk, llm.shape, out_dir=Path(tmp) / f"noperm-{weights}")
            put("random LoRA, q/k only, WITHOUT the permutation",
                logit_change_correlation(llm, hf, bad, f"{weights}-bad", peft_dir=qk))
            del llm
    print("logit-change correlation, peft vs llama.cpp, by llama.cpp weight format")
    print("| adapter | " + " | ".join(formats) + " |\n|---|" + "---|" * len(formats))
    for row, vals in table.items():
        print(f"| {row} | " + " | ".join(f"{vals.get(w, float('nan')):.4f}" for w in formats) + " |")


if __name__ == "__main__":
    main()
