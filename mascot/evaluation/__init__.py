"""Individual-level evaluation in the paper's table layout: systems (MASCOT adapters and the
prompted baselines) answer scenarios through the shared engine, a judge scores every persona
reply, and the results are written as JSON, CSV and Markdown (`python -m mascot eval`)."""

from mascot.evaluation.metrics import distinct_n, mean_pairwise_cosine, mean_std, self_bleu, sentence_bleu, to_100
from mascot.evaluation.runner import EvalConfig, run_eval
from mascot.evaluation.systems import SYSTEMS, Round, make_system

__all__ = ["SYSTEMS", "EvalConfig", "Round", "distinct_n", "make_system", "mean_pairwise_cosine", "mean_std",
           "run_eval", "self_bleu", "sentence_bleu", "to_100"]
