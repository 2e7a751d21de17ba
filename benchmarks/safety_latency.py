"""Crisis-check latency on CPU: milliseconds per `check` of one held-out message with two earlier user turns,
the classifiers loaded once beforehand, for the detector without the USE layer (MiniLM alone) and the shipped one (MiniLM + USE
stack), run back to back on the same machine; and each encoder alone on one message. Target: <= 20 ms median
and p95 per message.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/safety_latency.py [--runs 500] [--threads 1] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

from mascot.safety.detector import CrisisDetector
from mascot.safety.evaluation import encoder_costs, measure_latency
from mascot.safety.training.data import load_dev_multilingual, load_messages
from mascot.settings import apply_process_defaults


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=500)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args()
    apply_process_defaults()  # before torch starts its thread pool
    import torch

    torch.set_num_threads(args.threads)
    english = [e.text for e in load_messages() if e.split == "test"]
    other = [e.text for e in load_dev_multilingual()]
    shipped = CrisisDetector.load()
    minilm = CrisisDetector(classifier=shipped.classifier, reply_classifier=shipped.reply_classifier, use_multilingual=False)
    out = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
           "minilm_only_english": measure_latency(minilm, english, args.runs),
           "shipped_english": measure_latency(shipped, english, args.runs),
           "shipped_other_languages": measure_latency(shipped, other, args.runs),
           "encoders_one_message": encoder_costs(shipped, english[: args.runs])}
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
