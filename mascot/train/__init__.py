"""Training: Stage 1 persona-aware behavioural alignment (judge -> pairs -> reward model -> GRPO speakers).

Run with `python -m mascot train stage1 --recipe tiny-cpu`; see docs/training.md. Heavy imports (torch,
transformers, trl, peft) happen inside the step functions, so importing this package is cheap.
"""
