"""HTTP/1.1 on raw sockets, where httpx would change what is measured (every other request goes through httpx).

- `post_kept_alive`: the throughput clients' POST on a kept-alive connection. The clients share two cores with
  the server, and httpx spent ~7 ms of CPU a request there: the client, not the server, capped the load at
  ~50 requests/s. These bytes cost a tenth of that, so the figure is the server's.
- `post_once`: a hostile client's request on a fresh connection: the body all at once or a byte at a time, or
  sent whole and then hung up on. A client that must finish sending before it reads (httpx) cannot trickle a
  body under the server's body deadline, and never sees the status the server sends early (a 413 or 408
  before the body is done) before closing; that early answer, and the hang-up, are what is being probed.
"""

from __future__ import annotations

import asyncio
import re


def request_head(path: str, length: int, authorization: str | None = None) -> bytes:
    """A JSON POST's request line and headers, up to the blank line."""
    auth = f"Authorization: {authorization}\r\n" if authorization else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: bench\r\n{auth}Content-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def post_kept_alive(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, body: bytes
) -> tuple[int, bytes]:
    """One POST on a kept-alive connection, as plain bytes: (status, body)."""
    writer.write(request_head(path, len(body)) + body)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
    return status, await reader.readexactly(length)


async def post_once(
    port: int,
    path: str,
    body: bytes,
    *,
    authorization: str,
    byte_every_s: float = 0.0,
    hang_up_after_s: float = 0.0,
) -> int:
    """One request on a fresh connection: the body all at once or a byte at a time (`byte_every_s` apart,
    reading the status the server may send before it is done); or sent whole, then the client hangs up after
    `hang_up_after_s`. Returns the status (0: no answer, as expected after hanging up)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request_head(path, len(body), authorization))
        if byte_every_s:
            for i in range(len(body)):
                writer.write(body[i : i + 1])
                await writer.drain()
                try:
                    line = await asyncio.wait_for(reader.readline(), byte_every_s)
                    return int(line.split()[1]) if line else 0
                except asyncio.TimeoutError:
                    continue
        try:
            writer.write(body)
            await writer.drain()
        except OSError:  # the server answered early (413 / 408) and closed: read what it said
            pass
        if hang_up_after_s:
            await asyncio.sleep(hang_up_after_s)
            return 0
        line = await reader.readline()
        return int(line.split()[1]) if line else 0
    finally:
        writer.close()
