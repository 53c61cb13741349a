"""Command-line options, and the smaller defaults that --quick selects."""

import argparse
import os
from dataclasses import dataclass

from .servers import SERVER_KINDS
from .units import parse_size

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


DEFAULT_SMALL_DIR = "/dev/shm/ferry-bench-small" if os.path.isdir("/dev/shm") else None


@dataclass
class Options:
    """Everything a run was asked to do, after --quick defaults are applied."""

    scenarios: list[str]
    servers: list[str]
    quick: bool
    runs: int
    size: int
    disk_size: int
    streams: list[int]
    idle_sessions: list[int]
    globus_idle_max: int
    iperf_seconds: int
    dir: str
    ferry: str
    results: str
    clean: bool
    small_files: int = 2000
    small_dirs: int = 20
    small_dir: str = "/dev/shm/ferry-bench-small"
    restart_tries: int = 20
    service_kill_files: int = 1000
    service_kills: int = 10
    service_hosts: bool = True
    restart_size: int = 512 << 20
    restart_seed: int | None = None
    restart_tcp_bs: str = "auto"
    integrity_size: int = 2 << 30
    cksm_size: int = 4 << 30
    quic_paths: tuple = ("loopback", "loopback-gsi", "wan", "wan-long-haul", "wan-lossy", "fairness")
    quic_seconds: int = 20
    udt_paths: tuple = ("loopback", "loopback-gsi", "wan-long-haul", "wan-lossy", "fairness")
    udt_seconds: int = 20
    multilink_size: int = 0
    multilink_congestion: tuple = ("cubic",)
    multilink_parts: tuple = ("times", "kill")
    multilink_queues: tuple = ("fifo",)
    gcp_parts: tuple = ("paths",)
    gcp_paths: tuple = ("4ms", "15ms", "75ms", "60ms-1pct", "200ms-0.1pct")
    gcp_congestion: tuple = ("cubic",)
    gcp_largest: int = 10 << 30
    https_entries: int = 10_000
    https_idle: int = 10_000
    token_gets: int = 10_000
    tpc_size: int = 2 << 30


def _int_list(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def _name_list(choices):
    def parse(text: str) -> list[str]:
        names = [x.strip() for x in text.split(",") if x.strip()]
        bad = [n for n in names if n not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(bad)}; choose from {', '.join(choices)}")
        return names

    return parse


def _tcp_bs(text: str) -> str:
    text = text.strip().lower()
    if text in ("auto", "none"):
        return text
    try:
        return str(parse_size(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def parse_options(argv, scenario_names) -> Options:
    """Parses argv; explicit flags win over the --quick defaults."""
    p = argparse.ArgumentParser(
        prog="python3 bench/run.py",
        description="Benchmarks ferry against globus-gridftp-server and the iperf3 loopback limit. "
        "Build first (cargo build --release), and run nothing else meanwhile.",
    )
    p.add_argument("--quick", action="store_true", help="small sizes and 1 run: checks the runner, measures nothing")
    p.add_argument("--scenarios", type=_name_list(scenario_names), default=list(scenario_names),
                   help=f"comma-separated, from {','.join(scenario_names)} (default: all)")
    p.add_argument("--servers", type=_name_list(SERVER_KINDS), default=list(SERVER_KINDS),
                   help="comma-separated, from ferry,globus (default: both)")
    p.add_argument("--runs", type=int, help="timed runs per configuration and server (default 5; quick 1)")
    p.add_argument("--size", type=parse_size, help="memory-to-memory length (default 4G; quick 256M)")
    p.add_argument("--disk-size", type=parse_size, help="disk-to-disk file size (default 2G; quick 64M)")
    p.add_argument("--streams", type=_int_list, default=[1, 2, 4, 8], help="parallel stream counts (default 1,2,4,8)")
    p.add_argument("--idle-sessions", type=_int_list, help="idle session counts (default 1000,10000; quick 200)")
    p.add_argument("--globus-idle-max", type=int, default=1000,
                   help="most idle Globus sessions to open: each is a process of ~1.4 MB (default 1000)")
    p.add_argument("--iperf-seconds", type=int, help="iperf3 -t (default 5; quick 2)")
    p.add_argument("--dir", default="/tmp/ferry-bench", help="bench directory for the disk file and scratch (default /tmp/ferry-bench)")
    p.add_argument("--ferry", default=os.path.join(REPO_ROOT, "target", "release", "ferry"), help="ferry binary (default target/release/ferry)")
    p.add_argument("--results", default=os.path.join(REPO_ROOT, "bench", "results"), help="where reports go (default bench/results)")
    p.add_argument("--clean", action="store_true", help="also delete the disk source file on exit (it is kept for reuse by default)")
    p.add_argument("--small-files", type=int, help="small-files: how many 4 KiB files (default 2000; quick 200)")
    p.add_argument("--small-dirs", type=int, default=20, help="small-files: directories of the nested tree (default 20)")
    p.add_argument("--small-dir", default=DEFAULT_SMALL_DIR,
                   help="small-files: where the source trees and copies go (default /dev/shm/ferry-bench-small, "
                        "a tmpfs, so the per-file protocol cost is measured rather than the file system's; "
                        "without /dev/shm, DIR/small)")
    p.add_argument("--restart-tries", type=int, help="restart: kills per direction (default 20; quick 3)")
    p.add_argument("--service-kill-files", type=int, help="service: files of the killed job (default 1000; quick 100)")
    p.add_argument("--service-kills", type=int, help="service: SIGKILLs of the service during it (default 10; quick 3)")
    p.add_argument("--no-service-hosts", action="store_true",
                   help="service: leave out two service hosts on one PostgreSQL (needs Debian's postgresql)")
    p.add_argument("--restart-size", type=parse_size, help="restart: file size (default 512M; quick 128M)")
    p.add_argument("--restart-seed", type=int, help="restart: seed of the kill delays (default: drawn, printed in the report)")
    p.add_argument("--restart-tcp-bs", type=_tcp_bs, default="auto",
                   help="restart: ferry copy --tcp-bs for the tries: a size, `none`, or `auto` (default: the "
                        "first of none, 64K, 16K, 4K, 2K, 1K that makes a transfer last 2 s)")
    p.add_argument("--integrity-size", type=parse_size,
                   help="integrity: the tmpfs file fetched with and without verification (default 2G; quick 256M)")
    p.add_argument("--cksm-size", type=parse_size, help="integrity: the file CKSM is timed on (default 4G; quick 256M)")
    quic_parts = ("loopback", "loopback-gsi", "wan", "wan-long-haul", "wan-lossy", "fairness")
    p.add_argument("--quic-paths", type=_name_list(quic_parts), default=list(quic_parts),
                   help=f"quic: which parts to measure (default all: {','.join(quic_parts)})")
    p.add_argument("--quic-seconds", type=int, default=20,
                   help="quic: netlab transfers are sized to last at least this long (default 20)")
    udt_parts = ("loopback", "loopback-gsi", "wan-long-haul", "wan-lossy", "fairness")
    p.add_argument("--udt-paths", type=_name_list(udt_parts), default=list(udt_parts),
                   help=f"udt: which parts to measure (default all: {','.join(udt_parts)})")
    p.add_argument("--udt-seconds", type=int, default=20,
                   help="udt: netlab transfers are sized to last at least this long (default 20)")
    p.add_argument("--multilink-size", type=parse_size,
                   help="multilink: the file sent to every destination (default 48M; quick 16M)")
    gcp_parts = ("paths", "sizes", "tree")
    p.add_argument("--gcp-parts", type=_name_list(gcp_parts), default=["paths"],
                   help="gcp: paths (one size per path, with the guc sweep), sizes (1 KiB up to --gcp-largest), "
                        "tree (10 000 x 4 KiB, recursive); default paths")
    gcp_paths = ("4ms", "15ms", "75ms", "60ms-1pct", "200ms-0.1pct")
    p.add_argument("--gcp-paths", type=_name_list(gcp_paths + ("20ms-4g",)), default=list(gcp_paths),
                   help=f"gcp: which netlab paths (default: {','.join(gcp_paths)}; also 20ms-4g, a 4 Gbit/s "
                        "path with jumbo frames, for a path faster than the 1 Gbit/s gcp's first copy assumes)")
    p.add_argument("--gcp-congestion", type=_name_list(("cubic", "bbr")), default=["cubic"],
                   help="gcp: the hosts' congestion control, one or both (default cubic)")
    p.add_argument("--gcp-largest", type=parse_size, default=parse_size("10G"),
                   help="gcp sizes: the largest file on clean paths (default 10G; lossy paths stop at 1G)")
    p.add_argument("--multilink-congestion", type=_name_list(("cubic", "bbr")), default=["cubic"],
                   help="multilink: the hosts' congestion controls, each a full run (default cubic; the "
                        "links lose nothing, so the two differ little)")
    multilink_parts = ("times", "kill")
    p.add_argument("--multilink-parts", type=_name_list(multilink_parts), default=list(multilink_parts),
                   help="multilink: times (1-8 destinations, every subject), kill (a hop killed "
                        "mid-transfer: how soon it is named, what the retry sends); default both")
    p.add_argument("--multilink-queues", type=_name_list(("fifo", "sparse-first")), default=["fifo"],
                   help="multilink: the links' queues, each a full run: fifo (one tail-drop queue, the "
                        "emulator's default) or sparse-first (ACKs and other small packets ahead, as "
                        "fq_codel); default fifo")
    p.add_argument("--https-entries", type=int,
                   help="https: entries of the collection PROPFIND lists (default 10000; quick 1000)")
    p.add_argument("--https-idle", type=int,
                   help="https: idle keep-alive HTTPS connections held (default 10000; quick 200)")
    p.add_argument("--token-gets", type=int,
                   help="tokens: small GETs per timed run, with a token and with X.509 (default 10000; quick 1000)")
    p.add_argument("--tpc-size", type=parse_size,
                   help="tpc: the file each third-party copy pulls (default 2G; quick 256M)")
    a = p.parse_args(argv)
    q = a.quick
    order = [n for n in scenario_names if n in a.scenarios]
    return Options(
        scenarios=order,
        servers=[k for k in SERVER_KINDS if k in a.servers],
        quick=q,
        runs=a.runs if a.runs is not None else (1 if q else 5),
        size=a.size if a.size is not None else parse_size("256M" if q else "4G"),
        disk_size=a.disk_size if a.disk_size is not None else parse_size("64M" if q else "2G"),
        streams=a.streams,
        idle_sessions=a.idle_sessions if a.idle_sessions is not None else ([200] if q else [1000, 10000]),
        globus_idle_max=a.globus_idle_max,
        iperf_seconds=a.iperf_seconds if a.iperf_seconds is not None else (2 if q else 5),
        dir=os.path.abspath(a.dir),
        ferry=os.path.abspath(a.ferry),
        results=os.path.abspath(a.results),
        clean=a.clean,
        small_files=a.small_files if a.small_files is not None else (200 if q else 2000),
        small_dirs=a.small_dirs,
        small_dir=os.path.abspath(a.small_dir or os.path.join(a.dir, "small")),
        restart_tries=a.restart_tries if a.restart_tries is not None else (3 if q else 20),
        service_kill_files=a.service_kill_files if a.service_kill_files is not None else (100 if q else 1000),
        service_kills=a.service_kills if a.service_kills is not None else (3 if q else 10),
        service_hosts=not a.no_service_hosts,
        restart_size=a.restart_size if a.restart_size is not None else parse_size("128M" if q else "512M"),
        restart_seed=a.restart_seed,
        restart_tcp_bs=a.restart_tcp_bs,
        integrity_size=a.integrity_size if a.integrity_size is not None else parse_size("256M" if q else "2G"),
        cksm_size=a.cksm_size if a.cksm_size is not None else parse_size("256M" if q else "4G"),
        quic_paths=tuple(a.quic_paths),
        quic_seconds=a.quic_seconds,
        udt_paths=tuple(a.udt_paths),
        udt_seconds=a.udt_seconds,
        multilink_size=a.multilink_size if a.multilink_size is not None else parse_size("16M" if q else "48M"),
        multilink_congestion=tuple(a.multilink_congestion),
        multilink_parts=tuple(a.multilink_parts),
        multilink_queues=tuple(a.multilink_queues),
        gcp_parts=tuple(a.gcp_parts),
        gcp_paths=tuple(a.gcp_paths),
        gcp_congestion=tuple(a.gcp_congestion),
        gcp_largest=a.gcp_largest,
        https_entries=a.https_entries if a.https_entries is not None else (1000 if q else 10_000),
        https_idle=a.https_idle if a.https_idle is not None else (200 if q else 10_000),
        token_gets=a.token_gets if a.token_gets is not None else (1000 if q else 10_000),
        tpc_size=a.tpc_size if a.tpc_size is not None else parse_size("256M" if q else "2G"),
    )
