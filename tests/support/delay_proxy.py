"""A TCP proxy that adds latency: what `tc qdisc ... netem delay` does to a link, for kernels
built without netem (this project's test machines). Run on the store host in front of the
store: `python delay_proxy.py LISTEN_HOST LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT RTT_MS`.

Every byte is held for half the added round-trip time in each direction, in order, with no
limit on the bytes in flight (latency, not bandwidth); a new connection waits one added round
trip before its first byte moves, as a TCP handshake over the slow link would. Connections end
as their ends do: a reset or close of one side closes the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   delay: float) -> None:  # fmt: skip
    """Bytes from `reader` to `writer`, each chunk `delay` seconds after it arrived."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def receive() -> None:
        try:
            while data := await reader.read(1 << 16):
                queue.put_nowait((loop.time() + delay, data))
        finally:
            queue.put_nowait((loop.time() + delay, b""))

    async def send() -> None:
        while True:
            due, data = await queue.get()
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            if not data:
                return
            writer.write(data)
            await writer.drain()

    receiving = asyncio.ensure_future(receive())
    try:
        await send()
    finally:
        receiving.cancel()
        writer.close()


async def _connection(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
                      upstream: tuple[str, int], delay: float) -> None:  # fmt: skip
    await asyncio.sleep(2 * delay)  # the handshake's round trip over the slow link
    try:
        upstream_reader, upstream_writer = await asyncio.open_connection(*upstream)
    except OSError:
        client_writer.close()
        return
    with contextlib.suppress(OSError):
        await asyncio.gather(
            _forward(client_reader, upstream_writer, delay),
            _forward(upstream_reader, client_writer, delay),
        )


async def serve(listen: tuple[str, int], upstream: tuple[str, int], rtt_ms: float) -> None:
    delay = rtt_ms / 2000.0
    server = await asyncio.start_server(
        lambda r, w: _connection(r, w, upstream, delay), *listen, backlog=1024
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    host, port, up_host, up_port, rtt = sys.argv[1:6]
    asyncio.run(serve((host, int(port)), (up_host, int(up_port)), float(rtt)))
