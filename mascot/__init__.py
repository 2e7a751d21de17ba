"""MASCOT: multi-agent socio-collaborative companion groups (arXiv 2601.14230).

The package holds one engine (personas, director, speakers, backends) that the live chat,
training rollouts and evaluation all share, plus the two-stage training code. It never
imports gradio.
"""

__version__ = "0.1.0"
