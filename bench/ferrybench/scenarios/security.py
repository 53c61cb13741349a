"""GSI security levels: nodcau, dcau, dcsafe, dcpriv at 1/2/4/8 streams, memory to memory, for
the Globus pair, globus-url-copy against ferry, and the ferry pair, with CPU seconds per GB."""

import contextlib
import os
import pwd
import subprocess
from dataclasses import dataclass

from .. import processes
from ..alternation import Config, alternate
from ..comparison import summaries
from ..results import Panel, ScenarioResult, Table
from ..servers import BenchError, Server, free_port, start_ferry, wait_listening
from ..stats import ratio
from ..transfer import measure_command
from ..units import fmt, format_size
from .registry import scenario

LEVELS = ("nodcau", "dcau", "dcsafe", "dcpriv")
# globus-url-copy's flags per level (the default is DCAU A); ferry copy's long forms.
GUC_FLAGS = {"nodcau": ["-nodcau"], "dcau": [], "dcsafe": ["-dcsafe"], "dcpriv": ["-dcpriv"]}
FERRY_FLAGS = {"nodcau": ["--no-dcau"], "dcau": [], "dcsafe": ["--dcsafe"], "dcpriv": ["--dcpriv"]}
SUBJECTS = ("globus", "guc-ferry", "ferry")
NAMES = {"globus": "Globus pair", "guc-ferry": "guc → ferry serve", "ferry": "ferry pair"}
WARMUP_BYTES = 64 << 20

METHOD = (
    "GSI on both ends, memory to memory: `/dev/zero` on the server to `/dev/null` at the client, "
    "SIZE bytes per transfer (`-len`/`--length`, MODE E at every stream count). A throw-away CA "
    "from `ferry ca` (host `localhost`, one user mapped to `nobody`), a proxy from "
    "grid-proxy-init; `globus-gridftp-server` (root, forking a session process that runs as "
    "`nobody`) and `ferry serve --gsi --root /` with the same host credential, CAs and "
    "grid-mapfile. Subjects: the **Globus pair** (globus-url-copy → globus-gridftp-server), "
    "**guc → ferry serve**, and the **ferry pair** (ferry copy → ferry serve). Levels: `-nodcau` "
    "(clear, unauthenticated), default DCAU A (a TLS handshake per data connection, then clear), "
    "`-dcsafe` (PROT S) and `-dcpriv` (PROT P); under TLS 1.3 both S and P are AES-256-GCM "
    "records. Every client logs in with GSI and delegation. Throughput is SIZE over the client's "
    "wall time, login included; CPU is the client's rusage plus the server's process tree, per "
    "decimal GB. Subjects alternate run by run; one untimed 64 MiB warm-up each first."
)


@dataclass
class Subject:
    """A client kind against a server: what the alternation takes turns over."""

    kind: str
    server: Server

    @property
    def proc(self):
        return self.server.proc


def _setup_pki(ctx, workdir: str) -> dict:
    """`ferry ca` with a host and a user, and a proxy; returns the paths and client env."""
    account = "nobody" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    ca = os.path.join(workdir, "ca")
    subprocess.run([ctx.options.ferry, "ca", ca, "--host", "localhost", "--user", f"Bench User:{account}"],
                   check=True, capture_output=True)
    user = os.path.join(ca, "users", "Bench User")
    proxy = os.path.join(workdir, "x509up")
    certs = os.path.join(ca, "certificates")
    cmd = ["grid-proxy-init", "-q", "-cert", os.path.join(user, "usercert.pem"), "-key",
           os.path.join(user, "userkey.pem"), "-certdir", certs, "-out", proxy]
    subprocess.run(cmd, check=True, capture_output=True)
    return {
        "ca": ca,
        "certs": certs,
        "hostcert": os.path.join(ca, "hosts", "localhost", "hostcert.pem"),
        "hostkey": os.path.join(ca, "hosts", "localhost", "hostkey.pem"),
        "gridmap": os.path.join(ca, "grid-mapfile"),
        "proxy": proxy,
    }


def _start_ferry_gsi(ctx, workdir: str, pki: dict) -> Server:
    return start_ferry(ctx.options.ferry, workdir, out_name="ferry-gsi.out",
                       logins=("--gsi", "--host-cert", pki["hostcert"], "--host-key", pki["hostkey"],
                               "--cert-dir", pki["certs"], "--gridmap", pki["gridmap"]))


def _start_globus_gsi(workdir: str, pki: dict, extra: tuple = ()) -> Server:
    if os.geteuid() != 0:
        raise BenchError("a GSI globus-gridftp-server maps users only when run as root")
    conf = os.path.join(workdir, "globus-empty.conf")
    open(conf, "w").close()
    port = free_port()
    cmd = ["globus-gridftp-server", "-c", conf, "-p", str(port), "-control-interface", "127.0.0.1",
           "-data-interface", "127.0.0.1", "-no-chdir", "-l", os.path.join(workdir, "globus-gsi.log"), *extra]
    env = dict(os.environ)
    env.pop("X509_USER_PROXY", None)
    env.update(X509_CERT_DIR=pki["certs"], X509_USER_CERT=pki["hostcert"], X509_USER_KEY=pki["hostkey"],
               GRIDMAP=pki["gridmap"])
    out_path = os.path.join(workdir, "globus-gsi.out")
    with open(out_path, "wb") as out:
        proc = processes.spawn(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_listening(port, proc, out_path, "globus-gridftp-server (GSI)")
    except BaseException:
        processes.kill_tree(proc)
        raise
    return Server("globus", proc, port, cmd, out_path)


def _command(ctx, subject: str, server: Server, level: str, streams: int, length: int) -> list[str]:
    url = f"gsiftp://localhost:{server.port}/dev/zero"
    if subject == "ferry":
        return [ctx.options.ferry, "copy", *FERRY_FLAGS[level], "-p", str(streams), "--length", str(length),
                url, "/dev/null"]
    return ["globus-url-copy", *GUC_FLAGS[level], "-p", str(streams), "-len", str(length), url, "file:///dev/null"]


@contextlib.contextmanager
def _client_env(pki: dict):
    """The clients' GSI environment for the scenario (the clients inherit it)."""
    saved = {k: os.environ.get(k) for k in ("X509_CERT_DIR", "X509_USER_PROXY", "X509_USER_CERT", "X509_USER_KEY")}
    os.environ.update(X509_CERT_DIR=pki["certs"], X509_USER_PROXY=pki["proxy"])
    os.environ.pop("X509_USER_CERT", None)
    os.environ.pop("X509_USER_KEY", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@scenario("security", "GSI security levels (nodcau, dcau, dcsafe, dcpriv)")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    result = ScenarioResult("security", f"GSI security levels, memory to memory, {format_size(o.size)} per transfer",
                            METHOD)
    cfgs = [Config(f"{level} {n}", n) for level in LEVELS for n in o.streams]
    level_of = {c.label: c.label.split()[0] for c in cfgs}
    workdir = ctx.scratch("security")
    try:
        pki = _setup_pki(ctx, workdir)
    except (OSError, subprocess.CalledProcessError) as e:
        # No grid-proxy-init (globus-proxy-utils) or no ferry binary: nothing to measure.
        ctx.failures += 1
        detail = getattr(e, "stderr", b"") or b""
        result.notes.append(f"GSI set-up failed, not measured: {e} {detail.decode(errors='replace').strip()}")
        return result
    with contextlib.ExitStack() as stack:
        stack.enter_context(_client_env(pki))
        servers = {}
        for kind, start in (("ferry", lambda: _start_ferry_gsi(ctx, workdir, pki)),
                            ("globus", lambda: _start_globus_gsi(workdir, pki))):
            if kind not in o.servers:
                continue
            try:
                server = start()
            except BenchError as e:
                ctx.failures += 1
                result.notes.append(f"{kind} (GSI) did not start, not measured: {str(e).splitlines()[0]}")
                continue
            ctx.record_server(server)
            stack.callback(processes.kill_tree, server.proc)
            servers[kind] = server
        subjects = []
        for kind in SUBJECTS:
            server = servers.get("ferry" if kind in ("ferry", "guc-ferry") else "globus")
            if server is None:
                continue
            s = Subject(kind, server)
            try:
                measure_command(ctx, result, [server], _command(ctx, kind, server, "dcpriv", 1, WARMUP_BYTES),
                                WARMUP_BYTES, "warm-up", 1, subject=kind)
                subjects.append(s)
            except BenchError as e:
                ctx.failures += 1
                result.notes.append(f"{NAMES[kind]}: warm-up failed, not measured: {str(e).splitlines()[0]}")
        result.commands.clear()

        def measure_one(subject, config, _run):
            cmd = _command(ctx, subject.kind, subject.server, level_of[config.label], config.streams, o.size)
            return measure_command(ctx, result, [subject.server], cmd, o.size, config.label, config.streams,
                                   subject=subject.kind)

        samples = alternate(ctx, result, subjects, cfgs, o.runs, measure_one)

    kinds = [s.kind for s in subjects]
    for group in samples.values():
        result.raw += [s.as_dict() for s in group]
    full = {(c.label, k): samples.get((c.label, k), []) for c in cfgs for k in kinds}
    rate = summaries(full, lambda s: s.gb_s)
    cpu = summaries(full, lambda s: s.client_cpu_per_gb + s.server_cpu_per_gb)
    client_cpu = summaries(full, lambda s: s.client_cpu_per_gb)
    server_cpu = summaries(full, lambda s: s.server_cpu_per_gb)
    result.summaries.update(rate)

    header = ["level", "streams"] + [f"{NAMES[k]} GB/s" for k in kinds] + [f"{NAMES[k]} CPU-s/GB" for k in kinds]
    both = "ferry" in kinds and "globus" in kinds
    if both:
        header += ["ferry pair / Globus pair"]
    rows = []
    for c in cfgs:
        row = [level_of[c.label], str(c.streams)] + [rate[(c.label, k)].cell(2) for k in kinds]
        row += [cpu[(c.label, k)].cell(2) for k in kinds]
        if both:
            row.append(fmt(ratio(rate[(c.label, "ferry")], rate[(c.label, "globus")])))
        rows.append(row)
    result.tables.append(Table("Throughput (GB/s) and CPU seconds per GB, client + server: median (min–max)",
                               header, rows))
    header = ["level", "streams"]
    for k in kinds:
        header += [f"{NAMES[k]}: client CPU-s/GB", f"{NAMES[k]}: server"]
    rows = []
    for c in cfgs:
        row = [level_of[c.label], str(c.streams)]
        for k in kinds:
            row += [client_cpu[(c.label, k)].cell(2), server_cpu[(c.label, k)].cell(2)]
        rows.append(row)
    result.tables.append(Table("CPU seconds per GB by side (medians, min–max)", header, rows))

    # The bars, at 4 streams (or the largest stream count measured below it).
    p = 4 if 4 in o.streams else max(o.streams)
    if "ferry" in kinds:
        priv, clear = f"dcpriv {p}", f"nodcau {p}"
        bars = [["ferry pair dcpriv CPU-s/GB (bar ≤ 1.6)", cpu[(priv, "ferry")].cell(2)],
                ["ferry pair dcpriv / own clear (bar ≥ 0.40)", fmt(ratio(rate[(priv, "ferry")], rate[(clear, "ferry")]))]]
        if both:
            bars.append(["ferry pair / Globus pair, dcpriv (bar ≥ 1.7)",
                         fmt(ratio(rate[(priv, "ferry")], rate[(priv, "globus")]))])
        result.tables.append(Table(f"Bars at {p} streams", ["measure", "value"], bars))
    short = {"nodcau": "N", "dcau": "A", "dcsafe": "S", "dcpriv": "P"}
    groups = [f"{short[level_of[c.label]]}{c.streams}" for c in cfgs]
    result.panel = Panel("GSI levels × streams", "GB/s", groups,
                         {NAMES[k]: [rate[(c.label, k)] for c in cfgs] for k in kinds},
                         xlabel="N nodcau, A DCAU A, S dcsafe, P dcpriv; streams")
    return result
