"""The transfer service: many small files through the queue against `ferry copy -r`, and a
1000-file job through ten SIGKILLs of the service."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from .. import disk_files, processes
from ..results import ScenarioResult, Table
from ..servers import BenchError, free_port, running, wait_listening
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
    "`the_service_killed_mid_transfer_resumes_from_its_stored_ranges` covers checkpoints of large files."
)


class Service:
    """One `ferry service` at a time on a port and database that stay across kills."""

    def __init__(self, ctx, workdir: str):
        self.ctx = ctx
        self.workdir = workdir
        self.port = free_port()
        self.proc = None
        ca = os.path.join(workdir, "ca")
        subprocess.run([ctx.options.ferry, "ca", ca, "--host", "localhost", "--days", "2"],
                       check=True, capture_output=True)
        self.cert_dir = os.path.join(ca, "certificates")
        self.host = os.path.join(ca, "hosts", "localhost")
        self.tokens = os.path.join(workdir, "tokens")
        with open(self.tokens, "w") as f:
            f.write(f"{TOKEN} bench\n")
        self.db = os.path.join(workdir, "queue.db")
        self.env = dict(os.environ, X509_CERT_DIR=self.cert_dir, FERRY_TOKEN=TOKEN,
                        FERRY_SERVICE=f"https://localhost:{self.port}")

    def start(self):
        log = open(os.path.join(self.workdir, "service.log"), "ab")
        cmd = [self.ctx.options.ferry, "service", "--listen", f"127.0.0.1:{self.port}",
               "--database", self.db, "--tokens", self.tokens, "--cert-dir", self.cert_dir,
               "--host-cert", os.path.join(self.host, "hostcert.pem"),
               "--host-key", os.path.join(self.host, "hostkey.pem")]
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
                        job = svc.submit(_pairs(a, b, flat, out_dir, names), wait=True)
                        j = svc.job(job)
                        if j["job"]["job_state"] != "FINISHED":
                            raise BenchError(f"service job {job}: {j['job']['job_state']}: {j['job'].get('reason')}")
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
    return result
