"""The emulated network itself: is netlab's link accurate and fast enough to be the link?"""

import contextlib
import json
import os
import subprocess
import tempfile
import time

from ..options import REPO_ROOT
from ..results import ScenarioResult, Table
from .registry import scenario

NETLAB = os.path.join(REPO_ROOT, "target", "release", "ferry-netlab")
TOPOLOGIES = os.path.join(REPO_ROOT, "bench", "topologies")
STATE = "/run/ferry-netlab"

METHOD = (
    "`ferry-netlab` (crates/netlab) brings up two hosts in network namespaces joined by its "
    "userspace link emulator, and Debian's ping and iperf3 run inside them (`ferry-netlab exec`). "
    "**wan-60ms** (`bench/topologies/wan-60ms.toml`: 1 Gbit/s, 30 ms each way): `ping -c 50 -i 0.02` "
    "for the round trip; `iperf3 -t 15 -J` with the hosts' default (DTN-tuned: autotuning to 64 MiB) "
    "buffers for the rate, taken as the mean of the last 5 one-second intervals (steady state, after "
    "slow start) and over the whole run. **capacity**: the same two hosts with no rate limit and 1 ms "
    "each way, MTU 1500 and 9000, `iperf3 -P 4 -t 8`: what the emulator can carry. **lossy-wan** "
    "(`lossy-wan.toml`: 1 Gbit/s, 30 ms each way, 1 % loss each way) with cubic congestion control "
    "in both hosts: `iperf3 -t 20` at 1 and at 8 streams; the loss measured is the emulator's own "
    "count, lost / (lost + delivered) over every packet of the run, both directions. Emulator CPU is "
    "its process's user+system time over the iperf3 run, as % of one core. One run of each."
)


def _netlab(*args, timeout=60, check=True):
    r = subprocess.run([NETLAB, *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"ferry-netlab {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
    return r


@contextlib.contextmanager
def _lab(path, name):
    _netlab("up", path)
    try:
        yield name
    finally:
        _netlab("down", path, check=False)


def _exec(lab, host, cmd, timeout=120, check=True):
    return _netlab("exec", "--lab", lab, host, "--", *cmd, timeout=timeout, check=check)


def _emulator_cpu_s(lab):
    try:
        with open(os.path.join(STATE, f"fnl-{lab}.pid")) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def _stats(lab):
    return json.loads(_netlab("stats", "--lab", lab).stdout)


def _iperf(lab, args, seconds, tries=3):
    """Runs iperf3 from a to b; returns (report, emulator CPU % of a core). On a lossy link
    iperf3's own control exchange can fail; such a run is tried again."""
    addr = _netlab("addr", "--lab", lab, "b").stdout.strip()
    for attempt in range(tries):
        _exec(lab, "b", ["iperf3", "-s", "-D", "-1"])
        time.sleep(0.3)
        cpu0, t0 = _emulator_cpu_s(lab), time.monotonic()
        r = _exec(lab, "a", ["iperf3", "-c", addr, "-t", str(seconds), "-J", *args],
                  timeout=seconds + 60, check=False)
        cpu = 100 * (_emulator_cpu_s(lab) - cpu0) / (time.monotonic() - t0)
        subprocess.run([NETLAB, "exec", "--lab", lab, "b", "--", "pkill", "-x", "iperf3"], capture_output=True)
        try:
            report = json.loads(r.stdout)
        except json.JSONDecodeError:
            report = {"error": r.stderr.strip() or "no report"}
        if "error" not in report:
            return report, cpu
        time.sleep(1)
    raise RuntimeError(f"iperf3 {' '.join(args)} failed {tries} times: {report['error']}")


def _mbit(report):
    return report["end"]["sum_received"]["bits_per_second"] / 1e6


def _steady_mbit(report, last=5):
    iv = report["intervals"][-last:]
    return sum(i["sum"]["bits_per_second"] for i in iv) / len(iv) / 1e6


def _topology(tmp, name, link, congestion=None):
    text = f'name = "{name}"\n'
    if congestion:
        text += f'congestion = "{congestion}"\n'
    text += f'[[host]]\nname = "a"\n[[host]]\nname = "b"\n[[link]]\na = "a"\nb = "b"\n{link}\n'
    path = os.path.join(tmp, f"{name}.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def _verdict(ok):
    return "yes" if ok else "**no**"


@scenario("netlab", "Emulated networks (netlab)")
def run(ctx) -> ScenarioResult:
    result = ScenarioResult("netlab", "Emulated networks: netlab's link", METHOD)
    if os.geteuid() != 0:
        result.notes.append("Not measured: netlab needs root (network namespaces).")
        return result
    if not os.path.exists(NETLAB):
        result.notes.append(f"Not measured: {NETLAB} is missing (cargo build --release --workspace).")
        return result
    _netlab("down", "--all", check=False)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        wan = os.path.join(TOPOLOGIES, "wan-60ms.toml")
        ctx.log("netlab: wan-60ms ping and iperf3")
        with _lab(wan, "wan-60ms") as lab:
            out = _exec(lab, "a", ["ping", "-c", "50", "-i", "0.02", "-q", "10.77.0.2"]).stdout
            stats = out.strip().splitlines()[-1].split("=")[1].split("/")
            rtt, mdev = float(stats[1]), float(stats[3].split()[0])
            rows.append(["wan-60ms round trip (ping)", "60 ms", f"{rtt:.2f} ms (mdev {mdev:.2f})",
                         "60 ± 2 ms", _verdict(abs(rtt - 60) <= 2)])
            report, cpu = _iperf(lab, [], 15)
            steady, whole = _steady_mbit(report), _mbit(report)
            rows.append(["wan-60ms iperf3, 1 stream, tuned hosts", "1 Gbit/s",
                         f"{steady:.0f} Mbit/s steady ({whole:.0f} over 15 s with slow start)",
                         "≥ 900 Mbit/s", _verdict(steady >= 900)])
            rows.append(["emulator CPU at that rate", "", f"{cpu:.0f} % of a core", "", ""])
            result.raw.append({"check": "wan-60ms", "rtt_ms": rtt, "steady_mbit": steady,
                               "whole_mbit": whole, "emulator_cpu_pct": cpu})
        for mtu, bar in ((1500, 1000), (9000, 3000)):
            ctx.log(f"netlab: capacity at MTU {mtu}")
            path = _topology(tmp, f"cap{mtu}", f'delay = "1ms"\nmtu = {mtu}')
            with _lab(path, f"cap{mtu}") as lab:
                report, cpu = _iperf(lab, ["-P", "4"], 8)
                rate = _mbit(report)
                rows.append([f"capacity, MTU {mtu}, no rate limit (iperf3 -P 4)", "unlimited",
                             f"{rate:.0f} Mbit/s at {cpu:.0f} % of a core", f"≥ {bar} Mbit/s",
                             _verdict(rate >= bar)])
                result.raw.append({"check": f"capacity-{mtu}", "mbit": rate, "emulator_cpu_pct": cpu})
        lossy = _topology(tmp, "lossy", 'rate = "1Gbit"\ndelay = "30ms"\nloss = 1.0', congestion="cubic")
        rates = {}
        ctx.log("netlab: 1 % loss with cubic, 1 and 8 streams")
        with _lab(lossy, "lossy") as lab:
            for n in (1, 8):
                report, _ = _iperf(lab, ["-P", str(n)], 20)
                rates[n] = _mbit(report)
                rows.append([f"1 % loss, cubic, TCP, {n} stream{'s' if n > 1 else ''}", "1 Gbit/s, 1 % loss",
                             f"{rates[n]:.1f} Mbit/s", "", ""])
                result.raw.append({"check": f"lossy-tcp-{n}", "mbit": rates[n]})
            rows.append(["1 stream against 8 on the lossy path", "", f"{rates[1] / max(rates[8], 1e-9):.2f}",
                         "far below 1", _verdict(rates[1] < 0.5 * rates[8])])
            # TCP backs off to a few thousand packets; UDP at a fixed rate gives the loss count.
            before = _stats(lab)
            report, _ = _iperf(lab, ["-u", "-b", "200M", "-l", "1400"], 10)
            after = _stats(lab)
            lost = after["lost"] - before["lost"]
            total = lost + after["delivered"] - before["delivered"]
            loss = 100 * lost / max(total, 1)
            seen = report["end"]["sum"].get("lost_percent", float("nan"))
            rows.append(["loss accuracy: UDP at 200 Mbit/s for 10 s", "1 %",
                         f"{loss:.3f} % of {total} packets (iperf3 saw {seen:.3f} %)",
                         "1 ± 0.2 % over ≥ 100 000", _verdict(abs(loss - 1) <= 0.2 and total >= 100_000)])
            result.raw.append({"check": "lossy-udp", "loss_pct": loss, "packets": total, "iperf_lost_pct": seen})
    result.tables.append(Table("netlab link checks", ["check", "setting", "measured", "bar", "met"], rows))
    return result
