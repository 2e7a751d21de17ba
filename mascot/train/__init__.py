"""Two-stage training: Stage 1 aligns the speakers with their personas (candidates -> judge -> pairs -> reward
model -> GRPO speakers, `mascot.train.stage1`); Stage 2 trains the director by GRPO on simulated conversations
(`mascot.train.stage2`).

Both stages load their YAML recipes through one loader (`mascot.train.recipes`) and build their TRL and PEFT
configs with one set of builders (`mascot.train.trl_configs`). Run with `python -m mascot train stage1|stage2
--recipe tiny-cpu`; see docs/training.md and docs/stage2.md. Heavy imports (torch, transformers, trl, peft)
happen inside the step functions, so importing this package is cheap.
"""
