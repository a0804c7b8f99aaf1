"""A throwaway PostgreSQL cluster for tests and benchmarks.

:func:`start_cluster` runs ``initdb`` into a temporary directory and starts a server that
listens only on a Unix socket in that directory (on a random port number, which names
the socket), with durability switched off (``fsync=off``: a test cluster is thrown away).
PostgreSQL refuses to run as root, so under root every server command runs as the
``postgres`` OS user (``runuser``) in a directory that user owns.

A watchdog process stops the server and removes the directory when the process that
started it exits in any way (SIGKILL included), so a killed test run never leaves a
server behind; :meth:`Cluster.stop` does the same at once.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import hermes

#: Where Debian and Ubuntu put the server binaries (``postgresql-15`` …); ``PG_BIN``
#: overrides, and ``pg_ctl`` on ``PATH`` is the last resort.
BIN_CANDIDATES = ("/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin",
                  "/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/14/bin")
APP_ROLE = "hermes_app"
APP_PASSWORD = "hermes-test-secret"
ADMIN_PASSWORD = "hermes-admin-secret"
DATABASE = "hermes"


def find_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or ``None`` when there is none."""
    candidates = [os.environ.get("PG_BIN", "")] + list(BIN_CANDIDATES)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for c in candidates:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    """A running throwaway server: ``dsn`` connects as the unprivileged application role
    (owner of database ``hermes``, no superuser, no BYPASSRLS); ``admin_dsn`` as the
    superuser."""

    root: Path
    bin: Path
    port: int
    as_postgres: bool
    watchdog: subprocess.Popen | None = None

    @property
    def data(self) -> Path:
        return self.root / "data"

    def _dsn(self, user: str, password: str | None, dbname: str) -> str:
        pw = f" password={password}" if password else ""
        return f"host={self.root} port={self.port} user={user}{pw} dbname={dbname}"

    @property
    def dsn(self) -> str:
        return self._dsn(APP_ROLE, APP_PASSWORD, DATABASE)

    @property
    def admin_dsn(self) -> str:
        return self._dsn("postgres", ADMIN_PASSWORD, "postgres")

    def stop(self) -> None:
        """Stop the server now and remove its directory."""
        if self.watchdog is not None and self.watchdog.poll() is None:
            self.watchdog.terminate()  # its trap stops the server and removes the directory
            try:
                self.watchdog.wait(30)
            except subprocess.TimeoutExpired:
                self.watchdog.kill()
        _run(self, [str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"], check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def _wrap(as_postgres: bool, argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if as_postgres else argv


def _run(cluster: Cluster, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(_wrap(cluster.as_postgres, argv), check=check, capture_output=True, text=True)


def start_cluster(*, max_connections: int = 300) -> Cluster:
    """initdb + start a server; returns when it accepts connections. Raises
    ``RuntimeError`` (with the server's log) when it cannot start and ``FileNotFoundError``
    when there are no PostgreSQL binaries (see :func:`find_bin`)."""
    pg_bin = find_bin()
    if pg_bin is None:
        raise FileNotFoundError("no PostgreSQL server binaries (initdb, pg_ctl); install postgresql-15 "
                                "or set PG_BIN")
    as_postgres = os.geteuid() == 0
    root = Path(tempfile.mkdtemp(prefix="hermes-pg-"))
    if as_postgres:
        shutil.chown(root, "postgres", "postgres")
    os.chmod(root, 0o755)
    cluster = Cluster(root, pg_bin, _free_port(), as_postgres)
    try:
        pwfile = root / "pwfile"
        hermes.atomic_write_text(pwfile, ADMIN_PASSWORD + "\n", mode=0o600)
        if as_postgres:
            shutil.chown(pwfile, "postgres", "postgres")
        # Passwords are checked (scram), so a wrong password fails like on a real server.
        _run(cluster, [str(pg_bin / "initdb"), "-D", str(cluster.data), "-U", "postgres",
                       "--auth=scram-sha-256", f"--pwfile={pwfile}", "--encoding=UTF8", "--locale=C.UTF-8",
                       "--no-sync"])
        pwfile.unlink()
        opts = (f"-c listen_addresses='' -k {root} -p {cluster.port} -c fsync=off -c synchronous_commit=off "
                f"-c full_page_writes=off -c max_connections={max_connections} -c shared_buffers=128MB")
        # The watchdog outlives a SIGKILLed parent: it polls the parent and then stops the
        # server and removes the directory (also when it is terminated itself).
        stop = (f"{' '.join(_wrap(as_postgres, [str(pg_bin / 'pg_ctl'), '-D', str(cluster.data)]))} "
                f"-m immediate stop >/dev/null 2>&1; rm -rf '{root}'")
        script = (f"trap '{stop}; exit 0' TERM INT; while kill -0 {os.getpid()} 2>/dev/null; do sleep 1 & wait $!; done; "
                  f"{stop}")
        start = _run(cluster, [str(pg_bin / "pg_ctl"), "-D", str(cluster.data), "-o", opts, "-l",
                               str(root / "server.log"), "-w", "-t", "60", "start"], check=False)
        if start.returncode != 0:
            log = (root / "server.log").read_text(errors="replace") if (root / "server.log").exists() else ""
            raise RuntimeError(f"PostgreSQL did not start: {start.stderr.strip()}\n{log[-2000:]}")
        cluster.watchdog = subprocess.Popen(["sh", "-c", script], start_new_session=True,
                                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)
        _provision(cluster)
        return cluster
    except BaseException:
        cluster.stop()
        raise


def _provision(cluster: Cluster) -> None:
    """The application role (password login, no superuser, no BYPASSRLS) owning the
    database ``hermes`` (row-level security binds it too: FORCE), and the administrator's
    one-time search setup (:data:`hermes_postgres.schema.ADMIN_SQL`)."""
    import psycopg

    with psycopg.connect(cluster.admin_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD '{APP_PASSWORD}'")
        conn.execute(f"CREATE DATABASE {DATABASE} OWNER {APP_ROLE}")
    from .schema import ADMIN_SQL

    with psycopg.connect(cluster._dsn("postgres", ADMIN_PASSWORD, DATABASE), autocommit=True) as conn:
        conn.execute(ADMIN_SQL)  # what the README asks an administrator to run


if __name__ == "__main__":  # python -m hermes_postgres.testing: a server for manual tries
    c = start_cluster()
    print(c.dsn, flush=True)
    try:
        sys.stdin.read()
    finally:
        c.stop()


#: A HERMES_HOME's config.yaml for the postgres store (``%s``: the JSON-quoted user);
#: the DSN comes from ``HERMES_PG_DSN`` so that a test can hand each run another one.
HOME_CONFIG = """
sessions:
  store: postgres
plugins:
  postgres:
    dsn: {$env: HERMES_PG_DSN}
    user: %s
"""


def make_home(path: Path, user: str) -> Path:
    """A fresh HERMES_HOME at ``path`` whose sessions live in PostgreSQL as ``user``."""
    path.mkdir(mode=0o700)
    hermes.atomic_write_text(path / "config.yaml", HOME_CONFIG % json.dumps(user))
    return path


def run_hermes(home: Path, dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The real ``hermes`` CLI in a child process on ``home`` with ``HERMES_PG_DSN=dsn``."""
    env = {**os.environ, "HERMES_HOME": str(home), "HERMES_PG_DSN": dsn, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-c", "from hermes.cli import main; main()", *args], env=env,
                          capture_output=True, text=True, timeout=120)
