"""Errors of the annotation package; each message says what went wrong, why, and how to fix it."""

from __future__ import annotations

from mascot.errors import InputError, MascotError


class AnnotationError(MascotError):
    """Base class for annotation errors shown to researchers or annotators."""


class StudyNotFound(AnnotationError, LookupError):
    """A study id (or an assignment token) does not exist in the database."""


class LinkKeyInvalid(StudyNotFound):
    """A new annotator id came without the study's link key (or with a wrong one); shown like an unknown study."""


class StudyClosed(AnnotationError):
    """The study is closed, so it hands out no new items."""


class HoldExpired(AnnotationError):
    """The annotator's hold on an item expired and the item went to someone else."""


class AnnotatorInUse(AnnotationError):
    """Another browser session holds this annotator id (its server-issued key does not match)."""


class InvalidInput(AnnotationError, InputError):
    """An argument (choice, rating, annotator id, study setting) is invalid."""


class ImportValidationError(AnnotationError, ValueError):
    """An import file has bad rows; nothing was imported. `problems` lists (line, message)."""

    def __init__(self, path: str, problems: list[tuple[int, str]], max_shown: int = 20) -> None:
        self.path = path
        self.problems = problems
        shown = "; ".join(f"line {line}: {msg}" for line, msg in problems[:max_shown])
        more = f" (and {len(problems) - max_shown} more)" if len(problems) > max_shown else ""
        super().__init__(
            f"{path}: {len(problems)} bad row(s), nothing was imported. {shown}{more}. "
            "Fix these rows and run the import again."
        )
