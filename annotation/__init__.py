"""Blind pairwise comparison studies: SQLAlchemy store, assignment, statistics (no gradio, no torch)."""
