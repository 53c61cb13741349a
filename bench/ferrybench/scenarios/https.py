"""The HTTPS/WebDAV door against XRootD's (XrdHttp, Debian's 5.5), on the same tmpfs files.

One connection GET and PUT of one file with the same client (curl, HTTP/1.1, TLS), ferry's own
one-stream GridFTP figure on the same files beside them, four parallel Range GETs of one file,
a PROPFIND of a 10 000-entry collection, and idle keep-alive HTTPS connections' memory.
"""

import asyncio
import contextlib
import os
import pwd
import re
import shutil
import ssl
import subprocess
import time

from .. import processes, proctree
from ..alternation import Config, alternate
from ..comparison import summaries, throughput_panel
from ..results import ScenarioResult, Table
from ..servers import BenchError, Server, free_port, start_ferry, wait_listening
from ..stats import ratio
from ..transfer import guc_command, measure_command
from ..units import fmt, format_size
from .registry import scenario

TMPFS = "/dev/shm"
ENTRIES = 10_000

METHOD = (
    "Both doors serve the same tmpfs directory. ferry: `ferry serve --root DIR --anonymous "
    "--anonymous-write --https-listen 127.0.0.1:PORT` with a `ferry ca` host certificate; XRootD "
    "5.5 (Debian) with XrdHttp over TLS on the same certificate, configured as "
    "shared/reference/http-tpc-and-tokens.md §11 gives (`-R nobody`). The client is the same for "
    "both: `curl --http1.1 -k` (one connection, TLS), GET of SIZE to /dev/null and PUT of the "
    "same file from tmpfs. `ferry http` is the same ferry door on its clear-text listener. `ferry GridFTP` is `globus-url-copy -p 1` against the same ferry on the "
    "same files (clear MODE E, one stream): the door's own GridFTP figure; `ferry GridFTP P` the same "
    "with `-dcpriv` over `gsiftp://` (a GSI proxy, PROT P: TLS on the data channel), the TLS door's. "
    "`xrootd http` is XRootD without TLS. Range: four curl "
    "processes at once, each GETting a quarter of the file with `-r`; wall time of all four. "
    "Servers alternate run by run; medians of --runs. Server CPU is the server's process tree, "
    "client CPU curl's (or globus-url-copy's)."
)


def _tls_files(ctx, work: str) -> dict:
    """A throw-away CA with a localhost host certificate and a user mapped to nobody, and the
    user's proxy (for the GSI GridFTP figure): cacert, certdir, cert, key, gridmap, proxy."""
    ca = os.path.join(work, "ca")
    run = subprocess.run([ctx.options.ferry, "ca", ca, "--host", "localhost", "--user", "alice:nobody"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise BenchError(f"ferry ca failed: {run.stderr.strip()}")
    host = os.path.join(ca, "hosts", "localhost")
    user = os.path.join(ca, "users", "alice")
    proxy = os.path.join(work, "x509up")
    run = subprocess.run([ctx.options.ferry, "proxy", "init", "--cert", os.path.join(user, "usercert.pem"),
                          "--key", os.path.join(user, "userkey.pem"), "--out", proxy],
                         capture_output=True, text=True, env=dict(os.environ, X509_CERT_DIR=os.path.join(ca, "certificates")))
    if run.returncode != 0:
        raise BenchError(f"ferry proxy init failed: {run.stderr.strip()}")
    return {"cacert": os.path.join(ca, "ca", "cacert.pem"), "certdir": os.path.join(ca, "certificates"),
            "cert": os.path.join(host, "hostcert.pem"), "key": os.path.join(host, "hostkey.pem"),
            "gridmap": os.path.join(ca, "grid-mapfile"), "proxy": proxy}


def _start_ferry(ctx, pki: dict) -> tuple[Server, Server, Server]:
    """ferry with its GridFTP (anonymous and GSI) and HTTP doors; (the FTP Server, the HTTPS
    view, the clear-text HTTP view)."""
    work = ctx.scratch("ferry-https")
    https_port, http_port = free_port(), free_port()
    server = start_ferry(
        ctx.options.ferry, work,
        logins=("--anonymous", "--anonymous-write"),
        extra=("--https-listen", f"127.0.0.1:{https_port}", "--http-listen", f"127.0.0.1:{http_port}",
               "--host-cert", pki["cert"], "--host-key", pki["key"], "--gsi", "--cert-dir", pki["certdir"],
               "--gridmap", pki["gridmap"]),
    )
    # start_ferry serves --root /; the door and the GridFTP figure use the tmpfs directory by path.
    wait_listening(https_port, server.proc, server.log_path, "ferry's HTTPS door")
    wait_listening(http_port, server.proc, server.log_path, "ferry's clear-text HTTP door")
    ctx.record_server(server)
    return (server, Server("ferry", server.proc, https_port, server.command, server.log_path),
            Server("ferry http", server.proc, http_port, server.command, server.log_path))


def _start_xrootd(ctx, root: str, certdir: str, cert: str, key: str, tls: bool = True) -> Server:
    """XRootD with XrdHttp on `root`: over TLS, or (`tls` false) in clear text."""
    xrootd = shutil.which("xrootd")
    if xrootd is None:
        raise BenchError("xrootd is missing: run scripts/install-deps as root (xrootd-server, xrootd-server-plugins)")
    kind = "xrootd" if tls else "xrootd http"
    work = ctx.scratch(kind.replace(" ", "-"))
    os.chmod(work, 0o777)
    user = "nobody" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    uid = pwd.getpwnam(user).pw_uid
    own_cert, own_key = os.path.join(work, "hostcert.pem"), os.path.join(work, "hostkey.pem")
    shutil.copyfile(cert, own_cert)
    shutil.copyfile(key, own_key)
    secret = os.path.join(work, "macaroon-secret")
    with open(secret, "w") as f:
        f.write(__import__("base64").b64encode(os.urandom(32)).decode() + "\n")
    authdb = os.path.join(work, "authdb")
    with open(authdb, "w") as f:
        f.write("u * / a\n")
    for path, mode in ((own_cert, 0o444), (own_key, 0o400), (secret, 0o400), (authdb, 0o444)):
        os.chmod(path, mode)
        if os.geteuid() == 0:
            os.chown(path, uid, -1)
    port = free_port()
    conf = os.path.join(work, "xrootd.cfg")
    tls_lines = f"xrd.tls {own_cert} {own_key}\nxrd.tlsca certdir {certdir}\n" if tls else ""
    with open(conf, "w") as f:
        f.write(f"""all.export /
all.sitename bench
oss.localroot {root}
xrd.port {port}
xrd.protocol XrdHttp:{port} libXrdHttp.so
{tls_lines}http.exthandler xrdtpc libXrdHttpTPC.so
http.exthandler xrdmacaroons libXrdMacaroons.so
macaroons.secretkey {secret}
ofs.authorize 1
ofs.authlib ++ libXrdMacaroons.so
acc.authdb {authdb}
xrootd.chksum adler32
all.adminpath {work}
all.pidpath {work}
""")
    log = os.path.join(work, "xrootd.log")
    cmd = [xrootd, "-c", conf, "-l", log]
    if os.geteuid() == 0:
        cmd += ["-R", user]
    out = os.path.join(work, "xrootd.out")
    with open(out, "wb") as o:
        proc = processes.spawn(cmd, stdout=o, stderr=subprocess.STDOUT)
    server = Server(kind, proc, port, cmd, out)
    try:
        wait_listening(port, proc, out, kind)
    except BaseException:
        processes.kill_tree(proc)
        raise
    ctx.record_server(server)
    return server


def _curl(*args: str) -> list[str]:
    return ["curl", "--http1.1", "-k", "-sS", "--fail", *args]


# Where each door's URL paths start: ferry serves --root / (as every bench server does), XRootD
# the tmpfs directory itself.
_PREFIX: dict[str, str] = {}


def _url(server: Server, name: str) -> str:
    scheme = "http" if server.kind.endswith(" http") else "https"
    return f"{scheme}://localhost:{server.port}{_PREFIX.get(server.kind, '')}/{name}"


def _ranges(ctx, result, server: Server, name: str, size: int, label: str):
    """Four curl processes at once, each a quarter of `name`; one sample for all of them."""
    quarter = size // 4
    cmds = []
    for i in range(4):
        end = size - 1 if i == 3 else (i + 1) * quarter - 1
        cmds.append(_curl("-r", f"{i * quarter}-{end}", "-o", "/dev/null", _url(server, name)))
    ctx.record_command(result, cmds[0], server.port)
    cpu0 = proctree.tree_cpu_seconds(server.pid)
    t0 = time.monotonic()
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in cmds]
    codes = [p.wait(timeout=max(60.0, size / 20e6)) for p in procs]
    wall = time.monotonic() - t0
    if any(codes):
        raise BenchError(f"{label}: a Range GET failed ({codes}) against {server.kind}")
    from ..transfer import TransferSample
    return TransferSample(server.kind, label, 4, size, wall, proctree.tree_cpu_seconds(server.pid) - cpu0, 0.0, True)


def _vm_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _propfind(ctx, result, server: Server, directory: str) -> dict:
    cmd = _curl("-X", "PROPFIND", "-H", "Depth: 1", "-o", "/dev/null",
                "-w", "%{time_starttransfer} %{time_total} %{size_download}", _url(server, directory + "/"))
    ctx.record_command(result, cmd, server.port)
    rss0 = proctree.pss_kib(server.pid)
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise BenchError(f"PROPFIND against {server.kind} failed: {run.stderr.strip()}")
    first, total, size = run.stdout.split()
    return {"first_byte_ms": float(first) * 1e3, "total_ms": float(total) * 1e3, "bytes": int(float(size)),
            "pss_growth_kib": proctree.pss_kib(server.pid) - rss0}


async def _hold(port: int, n: int, concurrency: int = 64) -> list:
    """n keep-alive HTTPS connections that each made one request and stay open."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    sem = asyncio.Semaphore(concurrency)
    held = []

    async def one():
        async with sem:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                           server_hostname="localhost")
            writer.write(b"OPTIONS / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            m = re.search(rb"(?i)content-length:\s*(\d+)", head)
            if m and int(m.group(1)):
                await reader.readexactly(int(m.group(1)))
            held.append(writer)

    await asyncio.gather(*(one() for _ in range(n)))
    return held


def _idle(ctx, server: Server, n: int) -> float:
    """Server PSS per idle keep-alive HTTPS connection, in KiB."""
    time.sleep(0.5)
    base, _ = proctree.tree_pss_kib(server.pid)
    loop = asyncio.new_event_loop()
    try:
        held = loop.run_until_complete(_hold(server.port, n))
        time.sleep(1.0)
        now, _ = proctree.tree_pss_kib(server.pid)
        for w in held:
            w.close()
        loop.run_until_complete(asyncio.sleep(0.2))
    finally:
        loop.close()
    return (now - base) / n


@scenario("https", "HTTPS/WebDAV door against XRootD's")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    size = o.disk_size
    result = ScenarioResult("https", f"HTTPS door: {format_size(size)} per transfer, tmpfs, loopback", METHOD)
    for tool in ("curl", "globus-url-copy"):
        if shutil.which(tool) is None:
            raise BenchError(f"{tool} is missing: run scripts/install-deps as root")
    root = os.path.join(TMPFS, f"ferry-bench-https-{os.getpid()}")
    os.makedirs(root, mode=0o777, exist_ok=True)
    os.chmod(root, 0o777)
    try:
        return _run(ctx, result, root, size)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run(ctx, result, root: str, size: int) -> ScenarioResult:
    o = ctx.options
    ctx.log(f"https: writing a {format_size(size)} random file to {root}")
    src = os.path.join(root, "src.bin")
    with open(src, "wb") as f:
        left = size
        while left:
            chunk = os.urandom(min(left, 16 << 20))
            f.write(chunk)
            left -= len(chunk)
    os.chmod(src, 0o644)
    listing = os.path.join(root, "many")
    os.makedirs(listing, mode=0o755)
    for i in range(o.https_entries):
        open(os.path.join(listing, f"entry-{i:05d}.dat"), "w").close()
    pki = _tls_files(ctx, ctx.scratch("https-ca"))
    certdir, cert, key = pki["certdir"], pki["cert"], pki["key"]
    cfgs = [Config("GET", 1), Config("PUT", 1), Config("4 ranges", 4)]
    _PREFIX["ferry"] = root
    _PREFIX["ferry http"] = root
    with contextlib.ExitStack() as stack:
        ftp, door, clear = _start_ferry(ctx, pki)
        stack.callback(processes.kill_tree, ftp.proc)
        servers = [door]  # the TLS doors
        clears = [clear]  # the clear-text ones
        for tls, group in ((True, servers), (False, clears)):
            try:
                xrd = _start_xrootd(ctx, root, certdir, cert, key, tls=tls)
                stack.callback(processes.kill_tree, xrd.proc)
                group.append(xrd)
            except BenchError as e:
                ctx.failures += 1
                result.notes.append(f"xrootd ({'TLS' if tls else 'clear'}) did not start, not measured: "
                                    f"{str(e).splitlines()[0]}")
        gridftp = Server("ferry GridFTP", ftp.proc, ftp.port, ftp.command, ftp.log_path)
        gridftp_p = Server("ferry GridFTP P", ftp.proc, ftp.port, ftp.command, ftp.log_path)
        # globus-url-copy's GSI logins (PROT P) use the proxy; curl and the anonymous runs ignore it.
        saved = {k: os.environ.get(k) for k in ("X509_CERT_DIR", "X509_USER_PROXY")}
        os.environ.update(X509_CERT_DIR=certdir, X509_USER_PROXY=pki["proxy"])
        stack.callback(lambda: [os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
                                for k, v in saved.items()])

        def gsiftp(path: str) -> str:
            return f"gsiftp://localhost:{ftp.port}{path}"

        def measure_one(server, config, run_no):
            if server.kind in ("ferry GridFTP", "ferry GridFTP P"):
                private = server.kind == "ferry GridFTP P"
                url = gsiftp if private else gridftp.url
                if config.label == "GET":
                    cmd = guc_command(url(src), "file:///dev/null", 1)
                elif config.label == "PUT":
                    # Each login its own file: the anonymous one works as ftp, the proxy as nobody.
                    name = "gridftp-p-put.bin" if private else "gridftp-put.bin"
                    cmd = guc_command(f"file://{src}", url(os.path.join(root, name)), 1)
                else:
                    return None
                if private:
                    cmd.insert(1, "-dcpriv")
                return measure_command(ctx, result, [server], cmd, size, config.label, 1)
            if config.label == "GET":
                cmd = _curl("-o", "/dev/null", _url(server, "src.bin"))
            elif config.label == "PUT":
                dst = f"put-{server.kind.replace(' ', '-')}-{run_no}.bin"
                cmd = _curl("-T", src, "-o", "/dev/null", _url(server, dst))
                sample = measure_command(ctx, result, [server], cmd, size, config.label, 1)
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(root, dst))
                return sample
            else:
                return _ranges(ctx, result, server, "src.bin", size, config.label)
            return measure_command(ctx, result, [server], cmd, size, config.label, 1)

        kinds = [s.kind for s in servers] + [s.kind for s in clears] + ["ferry GridFTP", "ferry GridFTP P"]
        samples = alternate(ctx, result, servers + clears + [gridftp, gridftp_p], cfgs, o.runs, measure_one)
        samples = {k: [s for s in v if s is not None] for k, v in samples.items()}
        for group in samples.values():
            result.raw += [s.as_dict() for s in group]
        full = {(c.label, k): samples.get((c.label, k), []) for c in cfgs for k in kinds}
        rate = summaries(full, lambda s: s.gb_s)
        result.summaries.update(rate)
        result.tables.append(Table("Throughput, GB/s: median (min–max)", ["transfer"] + kinds,
                                   [[c.label] + [rate[(c.label, k)].cell() for k in kinds] for c in cfgs]))
        server_cpu = summaries(full, lambda s: s.server_cpu_per_gb)
        result.tables.append(Table("Server CPU seconds per GB (medians, min–max)", ["transfer"] + kinds,
                                   [[c.label] + [server_cpu[(c.label, k)].cell() for k in kinds] for c in cfgs]))
        rows = []
        nan = float("nan")

        def r(a, b):
            return fmt(ratio(a, b)) if a and b else nan

        for label in ("GET", "PUT"):
            get = lambda kind: rate.get((label, kind))  # noqa: E731
            rows.append([label, r(get("ferry"), get("xrootd")), r(get("ferry"), get("ferry GridFTP P")),
                         r(get("ferry http"), get("xrootd http")), r(get("ferry http"), get("ferry GridFTP")),
                         r(get("ferry"), get("ferry GridFTP"))])
            cpu = lambda kind: server_cpu.get((label, kind))  # noqa: E731
            rows.append([f"{label}, server CPU per GB", r(cpu("ferry"), cpu("xrootd")), "",
                         r(cpu("ferry http"), cpu("xrootd http")), "", ""])
        one = rate.get(("GET", "ferry"))
        four = rate.get(("4 ranges", "ferry"))
        rows.append(["4 ranges / 1 GET", r(four, one), "", r(rate.get(("4 ranges", "ferry http")),
                                                             rate.get(("GET", "ferry http"))), "", ""])
        result.tables.append(Table("Ratios (bars: ≥ 1.5 × XRootD, ≥ 0.8 × GridFTP one stream, ranges ≥ 1; "
                                   "TLS beside TLS, clear beside clear)",
                                   ["", "ferry HTTPS / XRootD HTTPS", "ferry HTTPS / ferry GridFTP PROT P",
                                    "ferry HTTP / XRootD HTTP (clear)", "ferry HTTP / ferry GridFTP (clear)",
                                    "ferry HTTPS / ferry GridFTP (clear)"], rows))
        result.panel = throughput_panel("HTTPS door", "GB/s", cfgs, kinds, rate, None)

        prop_rows = []
        for server in servers:  # TLS doors only
            try:
                p = _propfind(ctx, result, server, "many")
                prop_rows.append([server.kind, f"{p['first_byte_ms']:.0f}", f"{p['total_ms']:.0f}",
                                  format_size(p["bytes"]), f"{p['pss_growth_kib']}"])
            except (BenchError, subprocess.TimeoutExpired, ValueError) as e:
                result.notes.append(f"{server.kind}: PROPFIND failed: {e}")
        result.tables.append(Table(f"PROPFIND Depth 1 of a {o.https_entries}-entry collection",
                                   ["server", "first byte, ms", "total, ms", "body", "server PSS growth, KiB"],
                                   prop_rows))
        idle_rows = []
        for server in servers:
            try:
                ctx.log(f"https: {o.https_idle} idle connections to {server.kind}")
                idle_rows.append([server.kind, str(o.https_idle), f"{_idle(ctx, server, o.https_idle):.1f}"])
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError) as e:
                result.notes.append(f"{server.kind}: idle connections failed: {e}")
        result.tables.append(Table("Idle keep-alive HTTPS connections (one OPTIONS each, then held)",
                                   ["server", "connections", "server PSS per connection, KiB"], idle_rows))
    result.notes.append("`ferry http` is the same door on its clear-text listener (`--http-listen`); `xrootd http` a "
                        "second XRootD on the same files without `xrd.tls`. Both clear doors send files with "
                        "sendfile.")
    return result
