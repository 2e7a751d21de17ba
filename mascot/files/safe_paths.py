"""Confine user-given paths to known folders: `..`, absolute paths elsewhere and symlinks that lead
out are refused with a message that says which folders are allowed.

Used where a researcher types a folder or file name into the app (training output folders, recipe
files), so that a form field can never write to, or read from, anywhere else on the server.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from mascot.errors import MascotError


class PathNotAllowed(MascotError):
    """A path resolves outside every allowed folder."""


def is_inside(path: str | Path, root: str | Path) -> bool:
    """True when `path` (after resolving symlinks and `..`) is `root` or lies below it."""
    resolved, base = Path(path).resolve(), Path(root).resolve()
    return resolved == base or base in resolved.parents


def resolve_inside(path: str | Path, roots: Sequence[str | Path], *, what: str = "path",
                   base: str | Path | None = None) -> Path:
    """The absolute, symlink-resolved form of `path`, provided it lies inside one of `roots`.

    A relative `path` is taken relative to `base` (default: the current folder), the way a shell
    would. Raises PathNotAllowed naming the allowed folders otherwise.
    """
    raw = Path(path)
    if "\x00" in str(path):
        raise PathNotAllowed(f"The {what} contains a NUL character; give a plain folder name.")
    full = raw if raw.is_absolute() else Path(base or Path.cwd()) / raw
    resolved = full.resolve()
    for root in roots:
        if is_inside(resolved, root):
            return resolved
    allowed = ", ".join(f"`{Path(r)}`" for r in roots)
    lexical = Path(os.path.normpath(full.absolute()))
    if ".." in raw.parts:
        why = "it climbs out with `..`"
    elif any(lexical == Path(r).absolute() or Path(r).absolute() in lexical.parents for r in roots):
        why = "a symbolic link on the way leads outside them"
    else:
        why = "it is outside them"
    raise PathNotAllowed(
        f"The {what} {str(path)!r} is refused: it must lie inside {allowed}, and {why}. "
        f"Give a folder name such as `{Path(roots[0]) / 'my-run'}`."
    )
