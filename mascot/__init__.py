"""MASCOT: multi-agent socio-collaborative companion groups (arXiv 2601.14230).

The package holds one engine (personas, director, speakers, backends) that the live chat,
training rollouts and evaluation all share, plus the two-stage training code. It never
imports gradio.
"""

__version__ = "0.1.0"

import os as _os

# On small shared CPUs, OpenMP threads that spin while waiting steal the cores another process (the
# web server, a browser, a second model) needs: a decode step was measured going from 35 ms to 2.3 s.
# Sleeping waits cost nothing measurable here. Must be set before torch starts its thread pool.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
