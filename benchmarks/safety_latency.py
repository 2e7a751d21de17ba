"""Crisis-check latency on CPU: milliseconds per `check` of one held-out message with two earlier
user turns, the classifier loaded once beforehand. Target: <= 20 ms per message.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/safety_latency.py [--runs 500] [--threads 1]
"""

from __future__ import annotations

import argparse
import json

from mascot.safety.detector import CrisisDetector
from mascot.safety.evaluation import measure_latency
from mascot.safety.training.data import load_messages
from mascot.settings import apply_process_defaults


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=500)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    apply_process_defaults()  # before torch starts its thread pool
    import torch

    torch.set_num_threads(args.threads)
    texts = [e.text for e in load_messages() if e.split == "test"]
    print(json.dumps(measure_latency(CrisisDetector.load(), texts, args.runs), indent=1))


if __name__ == "__main__":
    main()
