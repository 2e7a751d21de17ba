"""Judges scoring persona replies on the paper's five criteria, pluggable by name.

`llm`: any OpenAI-compatible endpoint with a rubric prompt (cached on disk, retried).
`offline`: measurable signals with the bundled embedding model; an approximation of `llm` that
runs anywhere without a server.

    >>> judge = load_judge("offline")
    >>> verdicts = judge.score_batch([JudgeItem(persona, roster, dialogue, "That sounds so hard.")])
    >>> verdicts[0].aggregate
"""

from __future__ import annotations

import importlib
from typing import Any

from mascot.errors import unknown_name
from mascot.judges.base import CRITERIA, Judge, JudgeItem, Verdict, check_scores

# name -> "module:Class"; imported only when chosen (the offline judge loads torch).
JUDGES: dict[str, str] = {
    "llm": "mascot.judges.llm:LLMJudge",
    "offline": "mascot.judges.offline:OfflineJudge",
}


def load_judge(name: str, **kwargs: Any) -> Judge:
    """Build a judge by registry name; keyword options go to its constructor."""
    if name not in JUDGES:
        raise unknown_name("judge", name, list(JUDGES))
    module, cls = JUDGES[name].split(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)


__all__ = ["CRITERIA", "JUDGES", "Judge", "JudgeItem", "Verdict", "check_scores", "load_judge"]
