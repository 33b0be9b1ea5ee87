"""A real PostgreSQL for the tests, from the Debian `postgresql` package (`make postgres-deps` installs it):
`initdb` into a fresh temp directory, then `postgres` on 127.0.0.1 and a free port, run as the `postgres`
user when the tests run as root (initdb refuses root, and CI runs as root). The superuser and the role the
tests use (`advisor`, allowed to create databases, not a superuser) get random passwords; every connection is
over TCP with scram-sha-256. Stopped by the postmaster's PID (SIGINT: PostgreSQL's fast shutdown, which
disconnects clients; its SIGTERM would wait for every client to leave), then the directory is removed.

Speed over durability: fsync is off (the tests check the store's transactions, not PostgreSQL's disk).
The session-scoped fixture is `pg_server` (tests/conftest.py); `pg_url` gives each test its own database."""
from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from httpkit import free_port


def postgres_bindir() -> Path | None:
    """The newest /usr/lib/postgresql/N/bin that has initdb and postgres, else None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


class PgServer:
    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = free_port()
        self.super_password = secrets.token_urlsafe(18)
        self.password = secrets.token_urlsafe(18)  # the `advisor` role's
        self.dir = Path(tempfile.mkdtemp(prefix="advisor-pg-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_seconds = 0.0
        self._as_postgres = os.geteuid() == 0

    def _cmd(self, *args: str) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *args] if self._as_postgres else list(args)

    def url(self, dbname: str = "postgres", *, user: str = "advisor") -> str:
        password = self.password if user == "advisor" else self.super_password
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> PgServer:
        import psycopg

        t0 = time.perf_counter()
        data = self.dir / "data"
        data.mkdir()
        pwfile = self.dir / "pwfile"
        pwfile.write_text(self.super_password + "\n")
        if self._as_postgres:
            pg = pwd.getpwnam("postgres")
            for p in (self.dir, data, pwfile):
                os.chown(p, pg.pw_uid, pg.pw_gid)
        os.chmod(self.dir, 0o700)
        os.chmod(data, 0o700)
        subprocess.run(self._cmd(str(self.bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=scram-sha-256",
                                 f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"),
                       check=True, capture_output=True)
        pwfile.unlink()
        log = open(self.dir / "server.log", "wb")  # noqa: SIM115 - the server's for its lifetime
        self.proc = subprocess.Popen(self._cmd(str(self.bindir / "postgres"), "-D", str(data), "-k", str(self.dir),
                                               "-p", str(self.port), "-c", "listen_addresses=127.0.0.1",
                                               "-c", "fsync=off", "-c", "full_page_writes=off",
                                               "-c", "max_connections=50"), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(self.url(user="postgres"), autocommit=True, connect_timeout=2) as conn:
                    conn.execute(f"CREATE ROLE advisor LOGIN CREATEDB PASSWORD '{self.password}'")
                break
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("PostgreSQL did not start: " + self.log_tail()) from None
                time.sleep(0.1)
        self.start_seconds = time.perf_counter() - t0
        return self

    def create_database(self) -> str:
        """A new empty database owned by `advisor`; returns its URL."""
        import psycopg

        name = "t_" + secrets.token_hex(6)
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def log_tail(self) -> str:
        try:
            return (self.dir / "server.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.dir / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop(self) -> None:
        if self.proc is not None:
            pid = self.postmaster_pid()
            if pid is not None:
                os.kill(pid, signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                if pid is not None:
                    os.kill(pid, signal.SIGQUIT)
                self.proc.wait(30)
            self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
