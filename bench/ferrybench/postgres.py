"""A throw-away PostgreSQL for the service scenario: Debian's binaries (package `postgresql`,
which scripts/install-deps installs), a cluster made by initdb under the run's scratch
directory, on a free loopback port; as root it runs as the `postgres` account (it refuses root).
Durability stays at PostgreSQL's defaults (fsync on): the service's commits cost what they
would on a real site."""

import glob
import os
import shutil
import signal
import subprocess
import time

from . import processes
from .servers import BenchError, free_port


def _bin_dir() -> str:
    dirs = sorted(d for d in glob.glob("/usr/lib/postgresql/*/bin")
                  if os.path.exists(os.path.join(d, "initdb")))
    if not dirs:
        raise BenchError("PostgreSQL is not installed (apt-get install postgresql; scripts/install-deps does)")
    return dirs[-1]


class Postgres:
    """Started by `start`, stopped (and its files removed) by `stop`."""

    def __init__(self, workdir: str):
        self.workdir = workdir
        self.bin = _bin_dir()
        self.root = os.geteuid() == 0
        self.port = free_port()
        self.proc = None

    def _cmd(self, name: str) -> list[str]:
        exe = os.path.join(self.bin, name)
        return ["runuser", "-u", "postgres", "--", exe] if self.root else [exe]

    def url(self, db: str = "postgres") -> str:
        return f"postgres://ferry@127.0.0.1:{self.port}/{db}"

    def start(self) -> "Postgres":
        shutil.rmtree(self.workdir, ignore_errors=True)
        data = os.path.join(self.workdir, "data")
        os.makedirs(data)
        if self.root:
            subprocess.run(["chown", "-R", "postgres:postgres", self.workdir], check=True)
            os.chmod(self.workdir, 0o755)
        out = subprocess.run(self._cmd("initdb") + ["-A", "trust", "-U", "ferry", "-E", "UTF8", "-D", data],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise BenchError(f"initdb failed: {out.stderr.strip()[-500:]}")
        log = open(os.path.join(self.workdir, "postgres.log"), "ab")
        self.proc = processes.spawn(self._cmd("postgres") + [
            "-D", data, "-k", self.workdir, "-p", str(self.port),
            "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=50"],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while subprocess.run([os.path.join(self.bin, "pg_isready"), "-q", "-h", "127.0.0.1",
                              "-p", str(self.port)]).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"PostgreSQL did not start; see {self.workdir}/postgres.log")
            time.sleep(0.1)
        return self

    def query(self, sql: str) -> list[list[str]]:
        """Rows of a query, as text."""
        out = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "ferry", "-d", "postgres",
                              "-At", "-F", "\t", "-c", sql], capture_output=True, text=True)
        if out.returncode != 0:
            raise BenchError(f"psql: {out.stderr.strip()[-300:]}")
        return [line.split("\t") for line in out.stdout.splitlines() if line]

    def stop(self):
        if self.proc:
            # A fast shutdown (SIGINT to the postmaster's group), then whatever is left.
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
                self.proc.wait(timeout=15)
            except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
                pass
            processes.kill_tree(self.proc)
            self.proc = None
        shutil.rmtree(self.workdir, ignore_errors=True)
