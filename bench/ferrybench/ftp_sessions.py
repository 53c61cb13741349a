"""Many logged-in, idle FTP control connections, held open with asyncio."""

import asyncio
import time

LOGIN_TIMEOUT_S = 120.0


class LoginError(Exception):
    """The server did not accept an anonymous login as expected."""


async def read_reply(reader: asyncio.StreamReader) -> tuple[int, str]:
    """One FTP reply, multi-line (`220-` … `220 `) included: its code and text."""
    first = (await reader.readline()).decode("utf-8", "replace")
    if len(first) < 4 or not first[:3].isdigit():
        raise LoginError(f"bad reply line {first!r}")
    lines = [first]
    if first[3] == "-":
        end = first[:3] + " "
        while True:
            line = (await reader.readline()).decode("utf-8", "replace")
            if not line:
                raise LoginError("connection closed inside a multi-line reply")
            lines.append(line)
            if line.startswith(end):
                break
    return int(first[:3]), "".join(lines)


async def login(reader, writer) -> None:
    """220 banner, USER anonymous, PASS x, 230: an anonymous session ready for commands."""
    code, text = await read_reply(reader)
    if code != 220:
        raise LoginError(f"banner: {text.strip()}")
    writer.write(b"USER anonymous\r\n")
    await writer.drain()
    code, text = await read_reply(reader)
    if code == 331:
        writer.write(b"PASS x\r\n")
        await writer.drain()
        code, text = await read_reply(reader)
    if code != 230:
        raise LoginError(f"login: {text.strip()}")


class IdleSessions:
    """Holds logged-in control connections to one server; the loop runs only while opening or closing."""

    def __init__(self, port: int, concurrency: int):
        self.port = port
        self.concurrency = concurrency
        self.loop = asyncio.new_event_loop()
        self.conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.errors: list[str] = []

    def open_until(self, total: int) -> float:
        """Opens and logs in sessions until `total` are held (or fail); returns the seconds it took."""
        start = time.monotonic()
        self.loop.run_until_complete(self._open(total - len(self.conns)))
        return time.monotonic() - start

    async def _open(self, count: int) -> None:
        gate = asyncio.Semaphore(self.concurrency)

        async def one():
            async with gate:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                try:
                    await login(reader, writer)
                except BaseException:
                    writer.close()
                    raise
                self.conns.append((reader, writer))

        async def bounded():
            try:
                await asyncio.wait_for(one(), LOGIN_TIMEOUT_S)
            except (OSError, LoginError, asyncio.TimeoutError) as e:
                self.errors.append(f"{type(e).__name__}: {e}")

        await asyncio.gather(*(bounded() for _ in range(max(count, 0))))

    def still_open(self) -> int:
        """How many held sessions the server has not closed (EOF seen within a short look)."""
        self.loop.run_until_complete(asyncio.sleep(0.2))
        alive = 0
        for reader, _ in self.conns:
            if not reader.at_eof():
                alive += 1
        return alive

    def close(self) -> None:
        """Closes every connection and the loop."""
        async def shut():
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in pending:  # logins cut short by Ctrl-C
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for _, writer in self.conns:
                writer.close()
            await asyncio.gather(*(w.wait_closed() for _, w in self.conns), return_exceptions=True)

        try:
            self.loop.run_until_complete(shut())
        finally:
            self.conns.clear()
            self.loop.close()
