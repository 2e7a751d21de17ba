"""MASCOT: multi-agent socio-collaborative companion groups (arXiv 2601.14230).

The package holds one engine (`mascot.group`: personas, director, speakers, the conversation step)
that the live chat, training rollouts and evaluation all share, its model backends
(`mascot.backends`), the crisis detector (`mascot.safety`), and the two-stage training code
(`mascot.train`). It never imports gradio, and importing it changes nothing in the environment.
"""

from __future__ import annotations

import importlib.abc
import sys

__version__ = "0.2.0"

# Modules that moved when the package was split by concept: an old import names the new place.
MOVED = {
    "mascot.dialogue": "mascot.group.dialogue", "mascot.personas": "mascot.group.personas",
    "mascot.prompts": "mascot.group.prompts", "mascot.director": "mascot.group.director",
    "mascot.speaker": "mascot.group.speaker", "mascot.chat": "mascot.group.chat",
    "mascot.engine": "mascot.group.engine", "mascot.rollouts": "mascot.group.rollouts",
    "mascot.transcripts": "mascot.group.transcripts", "mascot.cli_chat": "mascot.group.cli",
    "mascot.safety_patterns": "mascot.safety.patterns", "mascot.safety_lexical": "mascot.safety.lexical",
    "mascot.safety_language": "mascot.safety.language", "mascot.safety_log": "mascot.safety.events",
    "mascot.safety_model": "mascot.safety.classifier", "mascot.safety_data": "mascot.safety.training.data",
    "mascot.safety_cli": "mascot.safety.cli",
    "mascot.models": "mascot.files.model_files", "mascot.checkpoints": "mascot.files.checkpoints",
    "mascot.locations": "mascot.settings", "mascot.safe_paths": "mascot.files.safe_paths",
    "mascot.backends.hf": "mascot.backends.transformers_backend",
    "mascot.backends.llamacpp_lora": "mascot.backends.llamacpp.lora",
    "mascot.backends.llamacpp_probe": "mascot.backends.llamacpp.probe",
    "mascot.backends.llamacpp_check": "mascot.backends.llamacpp.check",
    "mascot.backends.gguf_recode": "mascot.backends.llamacpp.recode",
    "mascot.train.configs": "mascot.train.stage1.config", "mascot.train.data": "mascot.train.stage1.data",
    "mascot.train.pairs": "mascot.train.stage1.pairs", "mascot.train.reward_model": "mascot.train.stage1.reward_model",
    "mascot.train.speakers": "mascot.train.stage1.speakers", "mascot.train.grpo_rollout": "mascot.train.stage1.grpo_rollout",
    "mascot.train.stage2_config": "mascot.train.stage2.config", "mascot.train.stage2_rewards": "mascot.train.stage2.rewards",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Turns an import of a moved module into an error that names its new place."""

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        if fullname in MOVED:
            raise ModuleNotFoundError(
                f"{fullname} was moved to {MOVED[fullname]}: update the import "
                "(the package layout is described in README.md, 'Project layout').",
                name=fullname,
            )
        return None


if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())
