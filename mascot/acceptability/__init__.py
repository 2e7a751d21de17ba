"""Replies a person would accept: the rubric's fault detectors, the labelled replies, a scorer validated on held-out
labels, and best-of-N selection built on it."""
