"""Bearer tokens on the HTTPS door: what a token costs against an X.509 proxy.

One curl process GETs a small file N times over one keep-alive TLS connection, once presenting
a WLCG token (ES256, from a local issuer whose keys the door fetched at start) and once a GSI
proxy; the two alternate run by run. The door verifies a token's signature once per token and
connection, as it checks a certificate chain once per connection, so the bar is that tokens
cost at most 5 % more time (issue 59).
"""

import base64
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .. import processes
from ..results import ScenarioResult, Table
from ..servers import BenchError, free_port, start_ferry, wait_listening
from ..stats import ratio, summarize
from .https import _tls_files
from .registry import scenario

AUDIENCE = "https://ferry.bench"
BODY = 1024

METHOD = (
    "`ferry serve --https-listen --gsi` with one `[[tokens.issuer]]` (a local HTTPS issuer in "
    "the bench process: OpenID configuration and a JWKS with one P-256 key; the door trusts its CA "
    "through SSL_CERT_FILE). A 1 KiB file on tmpfs. One `curl --http1.1` process with a config "
    "file of N URLs fetches it N times over one keep-alive connection, either with "
    "`Authorization: Bearer` (a WLCG token, `storage.read:/`, ES256) or with a `ferry proxy "
    "init` proxy as client certificate (mapped by the grid-mapfile). The two alternate run by "
    "run; wall time, medians of --runs."
)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class _Issuer:
    """An OpenID issuer on loopback over TLS, with one ES256 key."""

    def __init__(self, cert: str, key: str):
        from cryptography.hazmat.primitives.asymmetric import ec
        self.key = ec.generate_private_key(ec.SECP256R1())
        numbers = self.key.public_key().public_numbers()
        self.port = free_port()
        self.url = f"https://localhost:{self.port}/issuer"
        jwks = {"keys": [{"kty": "EC", "crv": "P-256", "kid": "bench", "alg": "ES256", "use": "sig",
                          "x": _b64(numbers.x.to_bytes(32, "big")), "y": _b64(numbers.y.to_bytes(32, "big"))}]}
        config = {"issuer": self.url, "jwks_uri": f"{self.url}/jwks"}
        pages = {"/issuer/.well-known/openid-configuration": config, "/issuer/jwks": jwks}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                page = pages.get(self.path)
                body = json.dumps(page).encode() if page else b"{}"
                self.send_response(200 if page else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, lifetime: int = 3600) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
        now = int(time.time())
        header = _b64(json.dumps({"alg": "ES256", "kid": "bench", "typ": "JWT"}).encode())
        claims = _b64(json.dumps({"iss": self.url, "sub": "bench", "aud": AUDIENCE, "wlcg.ver": "1.0",
                                  "iat": now, "nbf": now, "exp": now + lifetime, "jti": "bench",
                                  "scope": "storage.read:/"}).encode())
        signed = f"{header}.{claims}"
        r, s = decode_dss_signature(self.key.sign(signed.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signed}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def stop(self):
        self.server.shutdown()


@scenario("tokens", "Bearer tokens against X.509 on the HTTPS door")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    n = o.token_gets
    result = ScenarioResult("tokens", f"Bearer tokens: {n} GETs of 1 KiB on one connection", METHOD)
    if shutil.which("curl") is None:
        raise BenchError("curl is missing: run scripts/install-deps as root")
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise BenchError("python3-cryptography is missing: run scripts/install-deps as root")
    work = ctx.scratch("tokens")
    pki = _tls_files(ctx, ctx.scratch("tokens-ca"))
    root = os.path.join("/dev/shm", f"ferry-bench-tokens-{os.getpid()}")
    os.makedirs(root, mode=0o755, exist_ok=True)
    small = os.path.join(root, "small.bin")
    with open(small, "wb") as f:
        f.write(os.urandom(BODY))
    os.chmod(small, 0o644)
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        issuer = _Issuer(pki["cert"], pki["key"])
        stack.callback(issuer.stop)
        account = "nobody" if os.geteuid() == 0 else os.environ.get("USER", "nobody")
        conf = os.path.join(work, "ferry.toml")
        with open(conf, "w") as f:
            f.write(f'[[tokens.issuer]]\nurl = "{issuer.url}"\naudiences = ["{AUDIENCE}"]\naccount = "{account}"\n')
        port = free_port()
        saved = os.environ.get("SSL_CERT_FILE")
        os.environ["SSL_CERT_FILE"] = pki["cacert"]
        try:
            server = start_ferry(o.ferry, work, logins=(),
                                 extra=("--https-listen", f"127.0.0.1:{port}", "--host-cert", pki["cert"],
                                        "--host-key", pki["key"], "--gsi", "--cert-dir", pki["certdir"],
                                        "--gridmap", pki["gridmap"], "--config", conf))
        finally:
            if saved is None:
                os.environ.pop("SSL_CERT_FILE", None)
            else:
                os.environ["SSL_CERT_FILE"] = saved
        stack.callback(processes.kill_tree, server.proc)
        wait_listening(port, server.proc, server.log_path, "ferry's HTTPS door")
        ctx.record_server(server)
        urls = os.path.join(work, "urls")
        with open(urls, "w") as f:
            for _ in range(n):
                f.write(f'url = "https://localhost:{port}{small}"\noutput = "/dev/null"\n')
        token = issuer.token()
        base = ["curl", "--http1.1", "-sS", "--fail", "--cacert", pki["cacert"], "--config", urls]
        logins = {
            "token": ["-H", f"Authorization: Bearer {token}"],
            "X.509 proxy": ["--cert", pki["proxy"], "--key", pki["proxy"]],
        }
        result.commands.append(" ".join(base[:-1] + ["URLS", "-H", "'Authorization: Bearer TOKEN'"]))
        samples = {k: [] for k in logins}
        for i in range(o.runs):
            order = list(logins) if i % 2 == 0 else list(reversed(logins))
            for kind in order:
                ctx.log(f"tokens: {kind}, run {i + 1}/{o.runs}: {n} GETs")
                t0 = time.perf_counter()
                run = subprocess.run(base + logins[kind], capture_output=True, text=True)
                elapsed = time.perf_counter() - t0
                if run.returncode != 0:
                    raise BenchError(f"curl with {kind} failed: {run.stderr.strip()[:300]}")
                samples[kind].append(elapsed)
                result.raw.append({"login": kind, "run": i, "gets": n, "seconds": elapsed})
        s = {k: summarize(v) for k, v in samples.items()}
        rows = []
        for kind in logins:
            sm = s[kind]
            rows.append([kind, f"{sm.median:.3f}", f"{sm.low:.3f}-{sm.high:.3f}",
                         f"{sm.median / n * 1e6:.0f}"])
        cost = ratio(s["token"], s["X.509 proxy"])
        result.tables.append(Table(f"{n} GETs of 1 KiB over one TLS connection, seconds",
                                   ["login", "median", "range", "µs per GET"], rows))
        result.notes.append(f"token / X.509 time: {cost:.3f} (bar: at most 1.05)")
    return result
