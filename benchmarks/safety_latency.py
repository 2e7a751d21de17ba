"""Crisis-check latency on CPU: milliseconds per `check` of one held-out message with two earlier
user turns, the classifier loaded once beforehand. Target: <= 20 ms per message.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/safety_latency.py [--runs 500] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mascot  # noqa: E402,F401  (sets the OpenMP wait policy before torch starts)
import torch  # noqa: E402

from mascot.safety import CrisisDetector  # noqa: E402
from mascot.safety_cli import measure_latency  # noqa: E402
from mascot.safety_data import load_messages  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=500)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    texts = [e.text for e in load_messages() if e.split == "test"]
    print(json.dumps(measure_latency(CrisisDetector(), texts, args.runs), indent=1))


if __name__ == "__main__":
    main()
