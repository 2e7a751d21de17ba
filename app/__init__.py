"""Gradio UI for MASCOT: wiring only, one module per tab. All logic lives in `mascot/` and `annotation/`."""
