"""Timing one CKSM: a minimal FTP control client (login, one command, its final reply) and the
reference ADLER32 of a file, computed by the runner itself."""

import socket
import time
import zlib

CHUNK = 1 << 20


class FtpError(Exception):
    """The server closed the connection, timed out or replied other than expected."""


def adler32_of(path: str) -> int:
    """ADLER32 of the whole file, read in 1 MiB chunks (zlib's running value, starting at 1)."""
    value = 1
    with open(path, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                return value
            value = zlib.adler32(chunk, value)


class ControlSession:
    """One control connection to 127.0.0.1:port; replies are read line by line from the socket."""

    def __init__(self, port: int, timeout: float):
        try:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        except OSError as e:
            raise FtpError(f"connect to 127.0.0.1:{port}: {e}") from e
        self.lines = self.sock.makefile("rb")

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        self.close()

    def close(self) -> None:
        """QUIT without waiting for its reply, then close."""
        try:
            self.sock.sendall(b"QUIT\r\n")
        except OSError:
            pass
        self.lines.close()
        self.sock.close()

    def _line(self) -> str:
        try:
            raw = self.lines.readline()
        except OSError as e:  # socket.timeout included
            raise FtpError(f"reading a reply: {e}") from e
        if not raw:
            raise FtpError("the server closed the control connection")
        return raw.decode("utf-8", "replace").rstrip("\r\n")

    def reply(self) -> tuple[int, str]:
        """One reply: `NNN text`, or a multi-line one from `NNN-…` to the line starting `NNN `."""
        first = self._line()
        if len(first) < 3 or not first[:3].isdigit() or (len(first) > 3 and first[3] not in " -"):
            raise FtpError(f"bad reply line {first!r}")
        lines = [first]
        if first[3:4] == "-":
            end = first[:3] + " "
            while True:
                line = self._line()
                lines.append(line)
                if line.startswith(end) or line == first[:3]:
                    break
        return int(first[:3]), "\n".join(lines)

    def final_reply(self) -> tuple[int, str]:
        """The next reply of 200 or more; preliminary 1xx replies (markers) are skipped."""
        while True:
            code, text = self.reply()
            if code >= 200:
                return code, text

    def send(self, line: str) -> None:
        """One command line, CRLF-terminated."""
        try:
            self.sock.sendall(line.encode("utf-8") + b"\r\n")
        except OSError as e:
            raise FtpError(f"sending {line.split()[0]}: {e}") from e

    def login(self) -> None:
        """220 banner, USER anonymous, (331) PASS x, 230."""
        code, text = self.final_reply()
        if code != 220:
            raise FtpError(f"banner: {text}")
        self.send("USER anonymous")
        code, text = self.final_reply()
        if code == 331:
            self.send("PASS x")
            code, text = self.final_reply()
        if code != 230:
            raise FtpError(f"login: {text}")

    def timed(self, line: str) -> tuple[float, int, str]:
        """Seconds from sending `line` to its final reply having arrived, with that reply."""
        start = time.perf_counter()
        self.send(line)
        code, text = self.final_reply()
        return time.perf_counter() - start, code, text


def checksum_value(code: int, text: str) -> int:
    """The hexadecimal value of a `213 VALUE` reply; FtpError for any other reply."""
    last = text.splitlines()[-1]
    words = last[4:].split()
    if code != 213 or not words:
        raise FtpError(f"CKSM: {text}")
    try:
        return int(words[-1], 16)
    except ValueError as e:
        raise FtpError(f"CKSM: not a hexadecimal value: {text}") from e
