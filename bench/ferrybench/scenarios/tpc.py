"""HTTP third-party copy over a long path (netlab): ferry's door pulling from ferry's door against
XRootD pulling from XRootD, by X-Number-Of-Streams, with bbr and with cubic, on Linux's default
TCP buffers."""

import os
import shutil
import subprocess
import tempfile
import time

from .. import processes
from ..results import ScenarioResult, Table
from ..stats import summarize
from ..units import fmt
from .https import _tls_files
from .netlab import NETLAB, _exec, _lab, _netlab
from .registry import scenario
from .wan import _wait_port

MIB = 1 << 20
RTT_S = 75e-3
LINK_BIT_S = 1e9
CCS = ["bbr", "cubic"]
# (subject, X-Number-Of-Streams; "0": ferry's own choice, sent as 0)
SUBJECTS = [("ferry", "0"), ("ferry", "1"), ("ferry", "4"), ("ferry", "8"),
            ("xrootd", "1"), ("xrootd", "4"), ("xrootd", "8")]
PORT_FERRY_HTTP, PORT_FERRY_HTTPS, PORT_XROOTD = 8080, 8443, 1094
# Linux's own defaults (what a host nobody tuned has): at most 6 MiB of receive window.
DEFAULT_TCP = {"net.ipv4.tcp_rmem": "4096 131072 6291456", "net.ipv4.tcp_wmem": "4096 16384 4194304"}
COPY_TIMEOUT_S = 150

METHOD = (
    "Two netlab hosts joined by one emulated link: 1 Gbit/s, 37.5 ms each way (75 ms round trip), "
    "a queue of one bandwidth-delay product, both hosts on bbr, then both on cubic, with Linux's "
    "default TCP buffers set in both namespaces (tcp_rmem max 6 MiB, tcp_wmem max 4 MiB). Host b "
    "serves a random file of SIZE on tmpfs with both passive parties: `ferry serve --anonymous "
    "--http-listen 10.77.0.2:8080` and XRootD 5.5 (XrdHttp, clear text) on the same directory. "
    "Host a runs the active parties on TLS: `ferry serve --https-listen` (anonymous writes) and "
    "XRootD with XrdHttpTPC. A curl in host a sends each one `COPY` with `Source: "
    "http://10.77.0.2:…/file`, `Credential: none` and `X-Number-Of-Streams: N` (ferry's `0` is its "
    "own choice) and waits for the last line; throughput is SIZE over curl's wall time, request "
    "to `success:` (TLS between curl and the door on the same host, clear text on the long path "
    "for both). The copy lands on tmpfs in host a and is removed after each run. Subjects "
    "alternate run by run; a copy that takes longer than {timeout} s counts as failed."
)


def _spawn_in(lab, host, cmd, out):
    return processes.spawn([NETLAB, "exec", "--lab", lab, host, "--", *cmd], stdout=out,
                           stderr=subprocess.STDOUT)


def _topology(tmp, cc):
    path = os.path.join(tmp, f"tpc-{cc}.toml")
    with open(path, "w") as f:
        f.write(f'name = "tpc"\ncongestion = "{cc}"\n\n[[host]]\nname = "a"\n\n[[host]]\nname = "b"\n\n'
                '[[link]]\na = "a"\nb = "b"\nrate = "1Gbit"\ndelay = "37500us"\n')
    return path


def _xrootd_config(work, root, port, pki, tls):
    """An XRootD configuration in `work` serving `root` on `port` (TLS or clear text)."""
    os.makedirs(work, exist_ok=True)
    os.chmod(work, 0o777)
    cert, key = os.path.join(work, "hostcert.pem"), os.path.join(work, "hostkey.pem")
    shutil.copyfile(pki["cert"], cert)
    shutil.copyfile(pki["key"], key)
    authdb = os.path.join(work, "authdb")
    with open(authdb, "w") as f:
        f.write("u * / a\n")
    secret = os.path.join(work, "secret")
    with open(secret, "w") as f:
        f.write(__import__("base64").b64encode(os.urandom(32)).decode() + "\n")
    uid = __import__("pwd").getpwnam("nobody").pw_uid
    for p, mode in ((cert, 0o444), (key, 0o400), (authdb, 0o444), (secret, 0o400)):
        os.chmod(p, mode)
        os.chown(p, uid, -1)
    tls_lines = f"xrd.tls {cert} {key}\nxrd.tlsca certdir {pki['certdir']}\n" if tls else ""
    conf = os.path.join(work, "xrootd.cfg")
    with open(conf, "w") as f:
        f.write(f"all.export /\nall.sitename bench\noss.localroot {root}\nxrd.port {port}\n"
                f"xrd.protocol XrdHttp:{port} libXrdHttp.so\n{tls_lines}"
                "http.exthandler xrdtpc libXrdHttpTPC.so\nhttp.exthandler xrdmacaroons libXrdMacaroons.so\n"
                f"macaroons.secretkey {secret}\nofs.authorize 1\nofs.authlib ++ libXrdMacaroons.so\n"
                f"acc.authdb {authdb}\nall.adminpath {work}\nall.pidpath {work}\n")
    return conf


def _start(ctx, lab, tmp, pki, src_dir, dst_dir):
    """Both passive parties in b, both active ones in a; the processes."""
    procs = []
    ferry = ctx.options.ferry
    specs = [
        ("b", [ferry, "serve", "--listen", "10.77.0.2:2811", "--root", src_dir, "--anonymous",
               "--http-listen", f"10.77.0.2:{PORT_FERRY_HTTP}"], PORT_FERRY_HTTP, "ferry (source)"),
        ("a", [ferry, "serve", "--listen", "10.77.0.1:2811", "--root", dst_dir, "--anonymous",
               "--anonymous-write", "--https-listen", f"10.77.0.1:{PORT_FERRY_HTTPS}",
               "--host-cert", pki["cert"], "--host-key", pki["key"]], PORT_FERRY_HTTPS, "ferry (active)"),
    ]
    for host, root, tls in (("b", src_dir, False), ("a", dst_dir, True)):
        work = os.path.join(tmp, f"xrootd-{host}")
        conf = _xrootd_config(work, root, PORT_XROOTD, pki, tls)
        specs.append((host, ["xrootd", "-c", conf, "-l", os.path.join(work, "xrootd.log"), "-R", "nobody"],
                      PORT_XROOTD, f"xrootd ({host})"))
    for host, cmd, port, what in specs:
        out = open(os.path.join(tmp, what.replace(" ", "_").replace("(", "").replace(")", "") + ".out"), "wb")
        proc = _spawn_in(lab, host, cmd, out)
        procs.append(proc)
        _wait_port(lab, host, port, proc, what)
    return procs


def _copy(lab, subject, streams, name):
    """One COPY of `name` by `subject` with `streams`; the wall time in seconds."""
    if subject == "ferry":
        target = f"https://10.77.0.1:{PORT_FERRY_HTTPS}/{name}.copy"
        source = f"http://10.77.0.2:{PORT_FERRY_HTTP}/{name}"
    else:
        target = f"https://10.77.0.1:{PORT_XROOTD}/{name}.copy"
        source = f"http://10.77.0.2:{PORT_XROOTD}/{name}"
    cmd = ["curl", "--http1.1", "-k", "-sS", "-N", "-X", "COPY", "-H", f"Source: {source}",
           "-H", "Credential: none", "-H", f"X-Number-Of-Streams: {streams}", target]
    t0 = time.monotonic()
    r = _exec(lab, "a", cmd, timeout=COPY_TIMEOUT_S, check=False)
    wall = time.monotonic() - t0
    last = [l for l in r.stdout.splitlines() if l.strip()][-1:] or [r.stderr.strip()]
    if r.returncode != 0 or not last[0].startswith("success"):
        raise RuntimeError(f"{subject} -n {streams}: {last[0][:300]}")
    return wall


@scenario("tpc", "HTTP third-party copy over 75 ms (netlab): ferry against XRootD by streams")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    size = o.tpc_size
    result = ScenarioResult("tpc", "HTTP third-party pull over 75 ms, 1 Gbit/s: ferry and XRootD by streams",
                            METHOD.format(timeout=COPY_TIMEOUT_S))
    missing = [t for t in ("xrootd", "curl") if shutil.which(t) is None]
    if os.geteuid() != 0 or not os.path.exists(NETLAB) or missing:
        result.notes.append(f"Not measured: needs root, target/release/ferry-netlab and {', '.join(missing) or 'nothing else'}.")
        return result
    _netlab("down", "--all", check=False)
    rates = {}
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        os.chmod(tmp, 0o755)
        pki = _tls_files(ctx, ctx.scratch("tpc-pki"))
        src_dir, dst_dir = os.path.join(tmp, "src"), os.path.join(tmp, "dst")
        for d in (src_dir, dst_dir):
            os.makedirs(d)
            os.chmod(d, 0o777)
        name = "file"
        with open(os.path.join(src_dir, name), "wb") as f:
            for _ in range(size // MIB):
                f.write(os.urandom(MIB))
        os.chmod(os.path.join(src_dir, name), 0o644)
        for cc in CCS:
            ctx.log(f"tpc: 75 ms, {cc}")
            with _lab(_topology(tmp, cc), "tpc") as lab:
                for host in ("a", "b"):
                    for k, v in DEFAULT_TCP.items():
                        _exec(lab, host, ["sysctl", "-q", "-w", f"{k}={v}"])
                procs = _start(ctx, lab, tmp, pki, src_dir, dst_dir)
                try:
                    for r in range(o.runs):
                        order = SUBJECTS if r % 2 == 0 else list(reversed(SUBJECTS))
                        for subject, streams in order:
                            ctx.log(f"tpc: {cc} run {r + 1}/{o.runs} {subject} streams {streams}")
                            try:
                                wall = _copy(lab, subject, streams, name)
                                rates.setdefault((cc, subject, streams), []).append(size * 8 / wall / 1e6)
                                result.raw.append({"cc": cc, "subject": subject, "streams": streams,
                                                   "bytes": size, "seconds": wall})
                            except (RuntimeError, subprocess.TimeoutExpired) as e:
                                ctx.failures += 1
                                result.notes.append(f"{cc} run {r + 1} {subject} -n {streams} failed: {str(e).splitlines()[0]}")
                            for leftover in os.listdir(dst_dir):
                                os.remove(os.path.join(dst_dir, leftover))
                finally:
                    for p in procs:
                        processes.kill_tree(p)
    _report(result, rates, size)
    return result


def _report(result, rates, size):
    def med(key):
        v = rates.get(key)
        return summarize(v).median if v else None

    header = ["hosts' TCP"] + [f"{s} -n {n}" for s, n in SUBJECTS] + \
        ["ferry (own choice) / link", "ferry (own choice) / best XRootD"]
    rows = []
    for cc in CCS:
        cells = [cc]
        for s, n in SUBJECTS:
            v = rates.get((cc, s, n))
            cells.append(f"{fmt(summarize(v).median)} ({fmt(min(v))}–{fmt(max(v))})" if v else "failed")
        own = med((cc, "ferry", "0"))
        best_x = max([m for m in (med((cc, "xrootd", n)) for _, n in SUBJECTS if _ == "xrootd") if m] or [0])
        cells.append(fmt(own / (LINK_BIT_S / 1e6)) if own else "–")
        cells.append(fmt(own / best_x) if own and best_x else "–")
        rows.append(cells)
    result.tables.append(Table(f"Pull of {size >> 20} MiB over 75 ms, 1 Gbit/s: Mbit/s, median (min–max)",
                               header, rows))
