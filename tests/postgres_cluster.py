"""A throwaway PostgreSQL cluster for the annotation store's tests: `initdb` into a temporary folder, the server on a
Unix socket only (no TCP), trust authentication, fsync off, one fresh database per test store, and `pg_ctl stop`
at the end of the session, also when tests fail. Debian's binaries live in /usr/lib/postgresql/<version>/bin;
`make postgres` installs them. As root, the server runs as the `postgres` user (PostgreSQL refuses root)."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

INSTALL_HINT = "run `make postgres` (Debian's postgresql package), or `make test`, which does it"


def find_bindir() -> Path | None:
    """The folder holding initdb, pg_ctl and postgres: on PATH, else the newest Debian install."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(os.path.realpath(on_path)).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


class PostgresCluster:
    """One cluster in a temporary folder; `url(name)` creates database `name` on first use."""

    def __init__(self) -> None:
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError(f"PostgreSQL's initdb is not installed: {INSTALL_HINT}.")
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="mascot-pg-"))
        self.data, self.socket = self.root / "data", self.root / "sock"
        self.socket.mkdir()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.socket, "postgres")
        self.port = 5432
        self.created: set[str] = set()
        self.running = False

    def _run(self, *cmd: str) -> None:
        done = subprocess.run([*self.as_user, str(self.bindir / cmd[0]), *cmd[1:]], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def start(self) -> PostgresCluster:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        opts = f"-k {self.socket} -c listen_addresses='' -p {self.port} -c fsync=off -c max_connections=200"
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.root / "server.log"), "-w", "start")
        self.running = True
        return self

    def url(self, name: str) -> str:
        """A SQLAlchemy URL for database `name` (created empty the first time)."""
        if name not in self.created:
            import psycopg

            with psycopg.connect(host=str(self.socket), port=self.port, user="postgres", dbname="postgres",
                                 autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            self.created.add(name)
        return f"postgresql+psycopg://postgres@/{name}?host={self.socket}&port={self.port}"

    def url_for(self, key: str) -> str:
        """The database for one test store, named from `key` (the store's temp path): the same key, the same data."""
        return self.url("t_" + hashlib.sha1(key.encode()).hexdigest()[:20])

    def stop(self) -> None:
        if self.running:
            subprocess.run([*self.as_user, str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
                           capture_output=True)
            self.running = False
        shutil.rmtree(self.root, ignore_errors=True)
