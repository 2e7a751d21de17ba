"""Error types shown to users: each message says what went wrong, why, and how to fix it."""

from __future__ import annotations


class MascotError(Exception):
    """Base class for errors meant to be shown to a user (CLI message or UI notice)."""


class ConfigError(MascotError, ValueError):
    """A recipe, flag, registry name or persona file is invalid."""


class PersonaError(ConfigError):
    """A persona pack or persona definition is malformed."""


class BackendError(MascotError, RuntimeError):
    """A generation backend failed to load or to generate."""


class DirectorParseError(MascotError, ValueError):
    """The director's raw output could not be parsed into a valid directive."""


class InputError(MascotError, ValueError):
    """A user message (or other user input) is rejected, e.g. empty or too long."""


def unknown_name(kind: str, name: str, valid: list[str] | tuple[str, ...]) -> ConfigError:
    """Build the standard error for an unknown registry name, listing the valid ones."""
    return ConfigError(
        f"Unknown {kind} {name!r}. Valid {kind} names: {', '.join(sorted(valid))}."
    )
