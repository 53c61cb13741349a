"""The copy ceiling of one loopback stream: the simplest pair that reads its source and copies it
through a TCP socket, with nothing else in the way.

The sender reads `/dev/zero` into a 512 KiB buffer and writes it whole (as ferry's one-stream
sender does); the receiver reads into a 256 KiB buffer and never sleeps (it polls a non-blocking
socket), so no wake-up is ever paid. Each side is one single-threaded process; TCP_NODELAY is
set; the time runs from the accepted connection to the end of file, so no login and no
protocol. Any implementation that reads its source and copies through the socket pays at least
this much, which makes it the most a one-stream pair can reach on this machine.

Run as a script: `python3 ceiling.py SIZE` prints `{"gb_s": ...}`.
"""

import json
import os
import socket
import sys
import time

SEND_CHUNK = 512 << 10
RECV_CHUNK = 256 << 10


def _send(port: int, size: int) -> None:
    conn = socket.create_connection(("127.0.0.1", port))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    zero = os.open("/dev/zero", os.O_RDONLY)
    buf = memoryview(bytearray(SEND_CHUNK))
    sent = 0
    while sent < size:
        want = min(SEND_CHUNK, size - sent)
        n = os.readv(zero, [buf[:want]])
        conn.sendall(buf[:n])
        sent += n
    conn.close()


def measure(size: int) -> float:
    """GB/s (decimal) of one `size`-byte copy from a forked sender to this process."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    pid = os.fork()
    if pid == 0:
        try:
            _send(port, size)
        finally:
            os._exit(0)
    conn, _ = listener.accept()
    conn.setblocking(False)
    buf = bytearray(RECV_CHUNK)
    got = 0
    start = time.perf_counter()
    while True:
        try:
            n = conn.recv_into(buf)
        except BlockingIOError:
            continue
        if n == 0:
            break
        got += n
    elapsed = time.perf_counter() - start
    os.waitpid(pid, 0)
    if got != size:
        raise RuntimeError(f"ceiling pair moved {got} bytes, expected {size}")
    return got / elapsed / 1e9


if __name__ == "__main__":
    print(json.dumps({"gb_s": measure(int(sys.argv[1]))}))
