"""Which process of a multi-process training run this is (`accelerate launch`, `torchrun`): the launchers tell each
process its RANK and WORLD_SIZE. Only the main process writes the run's files (progress, manifest, adapters, run
card, curves); every process trains."""

from __future__ import annotations

import os


def world_size() -> int:
    """Processes in this training run (1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """True for the process that writes the run's files (rank 0, or the only process)."""
    return int(os.environ.get("RANK", "0")) == 0
