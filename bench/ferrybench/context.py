"""State shared by the scenarios of one invocation: options, scratch space, commands, results."""

import os
import re
import shlex
import shutil
import sys
import time

from .options import Options
from .results import ScenarioResult


class Context:
    """One benchmark invocation: what was asked, where scratch files go, what was run."""

    def __init__(self, options: Options, stamp: str):
        self.options = options
        self.stamp = stamp
        self.results: dict[str, ScenarioResult] = {}
        self.server_commands: dict[str, str] = {}
        self.notes: list[str] = []
        self.failures = 0
        os.makedirs(options.dir, mode=0o755, exist_ok=True)
        self.run_dir = os.path.join(options.dir, f"run-{stamp}-{os.getpid()}")
        os.makedirs(self.run_dir, mode=0o755)
        self._serial = 0
        self._t0 = time.monotonic()

    def scratch(self, name: str) -> str:
        """A new empty directory under this run's scratch directory."""
        self._serial += 1
        path = os.path.join(self.run_dir, f"{self._serial:03d}-{name}")
        os.makedirs(path, mode=0o755)
        return path

    def record_server(self, server) -> None:
        """Keeps the command a server was started with, for the report."""
        line = re.sub(r"\$SCRATCH/[^/ ]+", "$SCRATCH", server.command_line().replace(self.run_dir, "$SCRATCH"))
        self.server_commands.setdefault(server.kind, line)

    def record_command(self, result: ScenarioResult, cmd: list[str], port: int | None = None,
                       other_ports: dict[int, str] | None = None) -> None:
        """Adds a client command to the scenario's list once, with the port as a placeholder.

        other_ports names further ports (a third-party transfer's destination server: `PORT2`).
        """
        line = re.sub(r"\$SCRATCH/\d{3}-[^/ ]+", "$SCRATCH", shlex.join(cmd).replace(self.run_dir, "$SCRATCH"))
        for number, name in (other_ports or {}).items():
            line = re.sub(rf"(?<!\d){number}(?!\d)", name, line)
        if port is not None:
            line = re.sub(rf"(?<!\d){port}(?!\d)", "PORT", line)
        if line not in result.commands:
            result.commands.append(line)

    def log(self, message: str) -> None:
        """A progress line on stderr, so stdout carries only the final tables."""
        print(f"[{time.monotonic() - self._t0:7.1f}s] {message}", file=sys.stderr, flush=True)

    def cleanup(self) -> None:
        """Deletes this run's scratch directory (logs, destination files)."""
        shutil.rmtree(self.run_dir, ignore_errors=True)
