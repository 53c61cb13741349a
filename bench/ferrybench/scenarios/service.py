"""The transfer service: many small files through the queue against `ferry copy -r`, and a
1000-file job through ten SIGKILLs of the service."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import collections
import urllib.parse

from .. import disk_files, processes
from ..postgres import Postgres
from ..results import ScenarioResult, Table
from ..servers import BenchError, free_port, running, start_ferry, wait_listening
from ..stats import ratio, summarize
from .registry import scenario

FILE_SIZE = 4096
KILL_FILE_SIZE = 1 << 20
TOKEN = "bench-token-0123456789abcdef"
RUNS = 3

METHOD = (
    "Two anonymous `ferry serve` on loopback; `ferry service` (SQLite under the run directory, "
    "a certificate from `ferry ca`, a bearer token) copies between them third party. "
    "**Small files**: N files of 4 KiB (`--small-files`, in one flat directory under `--small-dir`, "
    "a tmpfs by default) copied server to server by `ferry copy -r` (defaults: 4 files in flight, "
    "pipelined) and by the service (`ferry submit --file LIST`, one job of N files, timed from "
    "the submission until `ferry submit --wait` sees the job FINISHED (it asks every 0.2 s); the service verifies "
    "ADLER32 as ferry copy does). Files per second is N over that wall time; runs alternate "
    f"({RUNS} of each), every destination is compared with the source (`diff -r`). "
    "**Kills**: one job of `--service-kill-files` files of 1 MiB; while it runs the service is "
    "killed with SIGKILL `--service-kills` times, at even intervals of the time an uninterrupted "
    "job took, and started again at once on the same port and database. Reported: whether the job "
    "ended FINISHED, whether every file is byte-identical (cmp), the attempts the files needed, and "
    "how many of the files that had a stored checkpoint were sent again from byte 0 (the bar: none). "
    "Files of 1 MiB go as pipelines of small files, which store no checkpoints; the suite's "
    "`the_service_killed_mid_transfer_resumes_from_its_stored_ranges` covers checkpoints of large files. "
    "**Two hosts** (leave out with `--no-service-hosts`): a PostgreSQL from Debian's packages (initdb in "
    "the run directory, default durability), two `ferry service` hosts on it (`--host-timeout 5`), a "
    "destination `ferry serve --log-transfer`; one job of the N small files is submitted to host A, A is "
    "killed with SIGKILL once 30 % of the files are FINISHED, and host B ends the job. Reported from the "
    "queue (attempts per host, which host finished each file) and from the destination's transfer log "
    "(how often each file was stored: a second store is expected only for a file A was moving when it "
    "died, whose attempt B took back)."
)


class Service:
    """One `ferry service` at a time on a port and database that stay across kills."""

    def __init__(self, ctx, workdir: str, database: str | None = None, extra=(), like: "Service | None" = None):
        self.ctx = ctx
        self.workdir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.port = free_port()
        self.proc = None
        self.extra = list(extra)
        if like is None:
            ca = os.path.join(workdir, "ca")
            subprocess.run([ctx.options.ferry, "ca", ca, "--host", "localhost", "--days", "2"],
                           check=True, capture_output=True)
            self.cert_dir = os.path.join(ca, "certificates")
            self.host = os.path.join(ca, "hosts", "localhost")
            self.tokens = os.path.join(workdir, "tokens")
            with open(self.tokens, "w") as f:
                f.write(f"{TOKEN} bench\n")
        else:
            self.cert_dir, self.host, self.tokens = like.cert_dir, like.host, like.tokens
        self.db = database or os.path.join(workdir, "queue.db")
        self.env = dict(os.environ, X509_CERT_DIR=self.cert_dir, FERRY_TOKEN=TOKEN,
                        FERRY_SERVICE=f"https://localhost:{self.port}")

    def start(self):
        log = open(os.path.join(self.workdir, "service.log"), "ab")
        cmd = [self.ctx.options.ferry, "service", "--listen", f"127.0.0.1:{self.port}",
               "--database", self.db, "--tokens", self.tokens, "--cert-dir", self.cert_dir,
               "--host-cert", os.path.join(self.host, "hostcert.pem"),
               "--host-key", os.path.join(self.host, "hostkey.pem"), *self.extra]
        self.proc = processes.spawn(cmd, stdout=log, stderr=subprocess.STDOUT)
        wait_listening(self.port, self.proc, os.path.join(self.workdir, "service.log"), "ferry service")

    def kill(self):
        if self.proc:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def stop(self):
        if self.proc:
            processes.kill_tree(self.proc)
            self.proc = None

    def cli(self, *args, timeout=600) -> str:
        out = subprocess.run([self.ctx.options.ferry, *args], env=self.env, capture_output=True,
                             text=True, timeout=timeout)
        if out.returncode != 0:
            raise BenchError(f"ferry {' '.join(args)}: {out.stderr.strip()[-500:]}")
        return out.stdout

    def submit(self, pairs, wait=False) -> str:
        lst = os.path.join(self.workdir, f"list-{time.monotonic_ns()}")
        with open(lst, "w") as f:
            for s, d in pairs:
                f.write(f"{s} {d}\n")
        args = ["submit", "--file", lst] + (["--wait"] if wait else [])
        return self.cli(*args).strip().splitlines()[0]

    def job(self, job_id: str, attempts=False) -> dict:
        args = ["job", job_id, "--json"] + (["--attempts"] if attempts else [])
        return json.loads(self.cli(*args))

    def wait(self, job_id: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                j = self.job(job_id)
                if j["job"]["job_state"] not in ("SUBMITTED", "ACTIVE"):
                    return j
            except BenchError:
                pass  # the service is restarting
            if time.monotonic() > deadline:
                raise BenchError(f"job {job_id} not done within {timeout:.0f} s")
            time.sleep(0.2)


def _pairs(src_server, dst_server, src_dir, out_dir, names):
    return [(src_server.url(os.path.join(src_dir, n)), dst_server.url(os.path.join(out_dir, n))) for n in names]


@scenario("service", "Transfer service")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    n = o.small_files
    result = ScenarioResult("service", f"Transfer service: {n} small files; a 1000-file job through kills", METHOD)
    os.makedirs(o.small_dir, mode=0o755, exist_ok=True)
    flat = disk_files.ensure_small_files(o.small_dir, n, 0, FILE_SIZE, ctx.log)
    names = sorted(os.listdir(flat))
    workdir = ctx.scratch("service")
    svc = Service(ctx, workdir)
    with running("ferry", ctx) as a, running("ferry", ctx) as b:
        svc.start()
        try:
            rates = {"copy": [], "service": []}
            for i in range(RUNS):
                for subject in ("copy", "service"):
                    out_dir = tempfile.mkdtemp(prefix=f"svc-{subject}-", dir=o.small_dir)
                    os.chmod(out_dir, 0o777)
                    os.sync()
                    start = time.monotonic()
                    if subject == "copy":
                        svc.cli("copy", "-r", a.url(flat.rstrip("/") + "/"), b.url(out_dir + "/"))
                    else:
                        # One client process: submit, then wait (job state every 0.2 s).
                        # `ferry submit --wait` fails unless the job ends FINISHED.
                        svc.submit(_pairs(a, b, flat, out_dir, names), wait=True)
                    took = time.monotonic() - start
                    same, diff = disk_files.same_tree(flat, out_dir)
                    if not same:
                        raise BenchError(f"{subject} run {i + 1}: destination differs: {diff}")
                    rates[subject].append(n / took)
                    ctx.log(f"service: {subject} run {i + 1}: {n / took:.0f} files/s")
                    shutil.rmtree(out_dir, ignore_errors=True)
            sc, ss = summarize(rates["copy"]), summarize(rates["service"])
            result.tables.append(Table(
                f"{n} files of 4 KiB, server to server (files/s, median of {RUNS}, min-max)",
                ["subject", "files/s", "min-max", "service / ferry copy -r"],
                [["ferry copy -r", f"{sc.median:.0f}", f"{sc.low:.0f}-{sc.high:.0f}", ""],
                 ["ferry service (submit → FINISHED)", f"{ss.median:.0f}", f"{ss.low:.0f}-{ss.high:.0f}",
                  f"{ratio(ss, sc):.2f}"]]))
            result.raw.append({"small_files": n, "copy_files_per_s": rates["copy"], "service_files_per_s": rates["service"]})

            # Kills.
            m, kills = o.service_kill_files, o.service_kills
            src = os.path.join(o.small_dir, f"kill-src-{m}")
            if not os.path.isdir(src) or len(os.listdir(src)) != m:
                shutil.rmtree(src, ignore_errors=True)
                os.makedirs(src)
                for k in range(m):
                    with open(os.path.join(src, f"f{k:05d}"), "wb") as f:
                        f.write(os.urandom(KILL_FILE_SIZE))
            knames = sorted(os.listdir(src))
            base_dir = tempfile.mkdtemp(prefix="svc-kill-base-", dir=o.small_dir)
            os.chmod(base_dir, 0o777)
            start = time.monotonic()
            job = svc.submit(_pairs(a, b, src, base_dir, knames))
            svc.wait(job, 900)
            base = time.monotonic() - start
            shutil.rmtree(base_dir, ignore_errors=True)
            out_dir = tempfile.mkdtemp(prefix="svc-kill-", dir=o.small_dir)
            os.chmod(out_dir, 0o777)
            start = time.monotonic()
            job = svc.submit(_pairs(a, b, src, out_dir, knames))
            for k in range(kills):
                time.sleep(base / (kills + 1))
                svc.kill()
                svc.start()
            j = svc.wait(job, 1800)
            took = time.monotonic() - start
            full = svc.job(job, attempts=True)
            same, diff = disk_files.same_tree(src, out_dir)
            attempts = full.get("attempts", [])
            extra = sum(max(0, len(a_) - 1) for a_ in attempts)
            from_zero_after_checkpoint = 0
            for per_file in attempts:
                stored_before = False
                for att in per_file:
                    if stored_before and att["resumed_bytes"] == 0:
                        from_zero_after_checkpoint += 1
                    if att["resumed_bytes"] > 0:
                        stored_before = True
            result.tables.append(Table(
                f"One job of {m} files of 1 MiB, the service killed {kills} times (SIGKILL) and restarted",
                ["job", "byte-identical", "uninterrupted (s)", "with kills (s)", "extra attempts",
                 "sent from 0 after a checkpoint"],
                [[j["job"]["job_state"], "yes" if same else f"no: {diff}", f"{base:.1f}", f"{took:.1f}",
                  str(extra), str(from_zero_after_checkpoint)]]))
            result.raw.append({"kill_files": m, "kills": kills, "state": j["job"]["job_state"], "identical": same,
                               "uninterrupted_s": base, "with_kills_s": took, "extra_attempts": extra})
            shutil.rmtree(out_dir, ignore_errors=True)
        finally:
            svc.stop()
        if o.service_hosts:
            _two_hosts(ctx, result, a, flat, names)
    return result


HOST_TIMEOUT = 5


def _two_hosts(ctx, result, src, flat, names):
    """Two service hosts on one PostgreSQL share one job of every small file; host A is killed
    (SIGKILL) once 30 % of the files are FINISHED and host B finishes the job. The destination
    server's transfer log says how often each file was stored."""
    o = ctx.options
    n = len(names)
    pg = Postgres(ctx.scratch("postgres")).start()
    dest_dir = ctx.scratch("hosts-dest")
    translog = os.path.join(dest_dir, "transfers.jsonl")
    dest = start_ferry(o.ferry, dest_dir, extra=("--log-transfer", translog))
    common = ["--host-timeout", str(HOST_TIMEOUT)]
    host_a = Service(ctx, ctx.scratch("host-a"), database=pg.url(), extra=["--host-id", "host-a", *common])
    host_b = Service(ctx, ctx.scratch("host-b"), database=pg.url(), extra=["--host-id", "host-b", *common],
                     like=host_a)
    out_dir = tempfile.mkdtemp(prefix="svc-hosts-", dir=o.small_dir)
    os.chmod(out_dir, 0o777)
    try:
        host_a.start()
        host_b.start()
        start = time.monotonic()
        job = host_a.submit(_pairs(src, dest, flat, out_dir, names))
        while True:
            counts = dict(pg.query("SELECT state, COUNT(*) FROM files GROUP BY state"))
            if int(counts.get("FINISHED", 0)) >= 0.3 * n:
                break
            if time.monotonic() - start > 600:
                raise BenchError("two hosts: 30 % of the files did not finish within 600 s")
            time.sleep(0.02)
        claimed_by_a = int(pg.query("SELECT COUNT(*) FROM files WHERE state = 'ACTIVE' AND claimed_by = 'host-a'")[0][0])
        finished_at_kill = int(counts.get("FINISHED", 0))
        host_a.kill()
        killed = time.monotonic() - start
        j = host_b.wait(job, 1800)
        took = time.monotonic() - start
        per_host = dict(pg.query("SELECT COALESCE(host, '?'), COUNT(*) FROM attempts GROUP BY host"))
        finished_by = dict(pg.query(
            "SELECT COALESCE(a.host, '?'), COUNT(*) FROM attempts a JOIN files f ON f.file_id = a.file_id "
            "AND f.attempts = a.attempt WHERE f.state = 'FINISHED' GROUP BY a.host"))
        taken_back = {urllib.parse.urlsplit(r[0]).path for r in pg.query(
            "SELECT DISTINCT f.dest FROM files f JOIN attempts a ON a.file_id = f.file_id "
            "WHERE a.error LIKE '%service stopped%'")}
        stores = collections.Counter()
        with open(translog) as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("code") == 226 and rec.get("command") in ("STOR", "ESTO") \
                        and rec.get("path", "").startswith(out_dir + "/"):
                    stores[rec["path"]] += 1
        paths = [os.path.join(out_dir, nm) for nm in names]
        once = sum(1 for p in paths if stores[p] == 1)
        again = [p for p in paths if stores[p] > 1]
        unexplained = [p for p in again if p not in taken_back]
        never = sum(1 for p in paths if stores[p] == 0)
        same, diff = disk_files.same_tree(flat, out_dir)
        result.tables.append(Table(
            f"Two service hosts on one PostgreSQL, one job of {n} files of 4 KiB; host A killed (SIGKILL) "
            f"at 30 % FINISHED, --host-timeout {HOST_TIMEOUT}",
            ["job", "byte-identical", "took (s)", "A killed at (s)", "A's claims at the kill",
             "attempts A / B", "finished by A / B", "stored once", "stored again (all taken back from A)",
             "stored again without cause", "never stored"],
            [[j["job"]["job_state"], "yes" if same else f"no: {diff}", f"{took:.1f}", f"{killed:.1f}",
              str(claimed_by_a), f"{per_host.get('host-a', 0)} / {per_host.get('host-b', 0)}",
              f"{finished_by.get('host-a', 0)} / {finished_by.get('host-b', 0)}", str(once),
              str(len(again)), str(len(unexplained)), str(never)]]))
        result.raw.append({"hosts_files": n, "state": j["job"]["job_state"], "identical": same, "took_s": took,
                           "killed_at_s": killed, "finished_at_kill": finished_at_kill,
                           "a_claims_at_kill": claimed_by_a, "attempts_per_host": per_host,
                           "finished_per_host": finished_by, "stored_once": once, "stored_again": len(again),
                           "stored_again_without_cause": len(unexplained), "never_stored": never})
    finally:
        host_a.stop()
        host_b.stop()
        processes.kill_tree(dest.proc)
        pg.stop()
        shutil.rmtree(out_dir, ignore_errors=True)
