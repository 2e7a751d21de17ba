"""Researcher logins for the /admin app: `MASCOT_ADMIN_PASSWORD`, or a users file of salted hashes.

A users file has one `USER:scrypt$N$r$p$SALT_HEX$HASH_HEX` line per researcher (blank lines and `#`
comments ignored). Add or replace a user with

    python -m app.admin_auth add-user NAME --file data/admin-users.txt

which asks for the password twice and rewrites the file atomically. Passwords are never stored.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import hashlib
import hmac
import os
import secrets
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from app.settings import Settings
from mascot.errors import MascotError

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
MIN_PASSWORD_CHARS = 8
ENABLE_HELP = (
    "The researcher app (Studies, Train, Jobs, Safety) is switched off because no login is configured. "
    "Set `MASCOT_ADMIN_PASSWORD` (user name `admin`, or `MASCOT_ADMIN_USER`), or point "
    "`MASCOT_ADMIN_USERS_FILE` at a file made with `python -m app.admin_auth add-user NAME --file FILE`, "
    "then restart the app and open /admin."
)


class AdminAuthError(MascotError):
    """The admin login configuration is unusable (bad users file, too short a password)."""


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """`scrypt$N$r$p$salt$hash` for `password` with a fresh 16-byte salt."""
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32)
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${digest.hex()}"


def verify_password(password: str, encoded: str) -> bool:
    """Constant-time check of `password` against a `hash_password` string."""
    try:
        kind, n, r, p, salt, digest = encoded.split("$")
        if kind != "scrypt":
            return False
        got = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p),
                             dklen=len(bytes.fromhex(digest)))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got.hex(), digest)


def read_users(path: str | Path) -> dict[str, str]:
    """`{user: encoded hash}` from a users file; raises AdminAuthError naming the bad line."""
    users: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AdminAuthError(f"Cannot read the admin users file {path}: {exc.strerror}. "
                             "Create it with `python -m app.admin_auth add-user NAME --file FILE`.") from exc
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, encoded = line.partition(":")
        if not sep or not user or not encoded.startswith("scrypt$") or encoded.count("$") != 5:
            raise AdminAuthError(f"{path}, line {number}: expected USER:scrypt$N$r$p$SALT$HASH. "
                                 "Write lines with `python -m app.admin_auth add-user NAME --file FILE`.")
        users[user] = encoded
    return users


def admin_checker(settings: Settings) -> Callable[[str, str], Awaitable[bool]] | None:
    """The login check for /admin, or None when no login is configured (the app is then disabled)."""
    users: dict[str, str] = {}
    if settings.admin_users_file:
        users.update(read_users(settings.admin_users_file))
    if settings.admin_password:
        if len(settings.admin_password) < MIN_PASSWORD_CHARS:
            raise AdminAuthError(f"MASCOT_ADMIN_PASSWORD must have at least {MIN_PASSWORD_CHARS} characters.")
        users[settings.admin_user] = hash_password(settings.admin_password)
    if not users:
        return None
    decoy = hash_password(secrets.token_hex(8))

    def check_now(user: str, password: str) -> bool:
        # Unknown users cost the same scrypt as known ones, so timing does not reveal user names.
        ok = verify_password(password, users.get(user, decoy))
        return ok and user in users

    async def check(user: str, password: str) -> bool:  # scrypt off the event loop
        return await asyncio.to_thread(check_now, user, password)

    return check


def add_user(path: str | Path, user: str, password: str) -> None:
    """Add or replace `user` in the users file (created if missing), atomically."""
    if not user or ":" in user or user != user.strip():
        raise AdminAuthError("A user name must be non-empty, without ':' or surrounding spaces.")
    if len(password) < MIN_PASSWORD_CHARS:
        raise AdminAuthError(f"Choose a password of at least {MIN_PASSWORD_CHARS} characters.")
    path = Path(path)
    users = read_users(path) if path.exists() else {}
    users[user] = hash_password(password)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write("# MASCOT researcher logins (python -m app.admin_auth add-user NAME --file FILE)\n")
        fh.writelines(f"{u}:{h}\n" for u, h in sorted(users.items()))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.admin_auth", description="Manage /admin logins.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("add-user", help="add or replace a researcher login (asks for the password)")
    p.add_argument("user")
    p.add_argument("--file", required=True, help="users file (set MASCOT_ADMIN_USERS_FILE to it)")
    args = parser.parse_args(argv)
    password = os.environ.get("MASCOT_NEW_ADMIN_PASSWORD") or getpass.getpass("Password: ")
    if "MASCOT_NEW_ADMIN_PASSWORD" not in os.environ and getpass.getpass("Again: ") != password:
        print("The two passwords differ; nothing was written.", file=sys.stderr)
        return 2
    try:
        add_user(args.file, args.user, password)
    except AdminAuthError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"Saved login {args.user!r} in {args.file}. Start the app with MASCOT_ADMIN_USERS_FILE={args.file}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
