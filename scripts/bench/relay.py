#!/usr/bin/env python3
"""A loopback TCP relay that counts the bytes a server sends (what its clients read), and can
delay them as a link between two machines would.

relay.py LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT COUNT_FILE [DELAY_MS]
The count (bytes from the server, bytes to the server) is written to COUNT_FILE after every
connection closes and on SIGTERM. With DELAY_MS, every piece of data goes on DELAY_MS after it
arrived, in each direction (a round trip takes twice that): latency, not a bandwidth limit, since
pieces are in flight together (up to 64 of them per direction, 4 MiB). Where the kernel has
netem, `tc qdisc … netem delay` does this better; this machine's kernel has no netem.
Standard library only."""
import asyncio, signal, sys

listen_port, host, port, count_file = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
delay = float(sys.argv[5]) / 1000 if len(sys.argv) > 5 else 0.0
counts = {"from_server": 0, "to_server": 0}


def save():
    with open(count_file, "w") as f:
        f.write(f"{counts['from_server']} {counts['to_server']}\n")


async def pipe(reader, writer, key):
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue(maxsize=64)

    async def forward():
        # Each piece leaves `delay` after it arrived; pieces behind it are already on their way.
        # After the other side went away the queue is still emptied, so the reader never waits.
        broken = False
        while True:
            arrived, data = await queue.get()
            if data is None:
                return
            if broken:
                continue
            wait = arrived + delay - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                writer.write(data)
                await writer.drain()
            except ConnectionError:
                broken = True

    sender = asyncio.create_task(forward()) if delay > 0 else None
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            counts[key] += len(data)
            if sender:
                await queue.put((loop.time(), data))
            else:
                writer.write(data)
                await writer.drain()
        if sender:
            await queue.put((loop.time(), None))
            await sender
    except (ConnectionError, asyncio.CancelledError):
        if sender:
            sender.cancel()
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def handle(client_reader, client_writer):
    server_reader, server_writer = await asyncio.open_connection(host, port)
    await asyncio.gather(pipe(client_reader, server_writer, "to_server"), pipe(server_reader, client_writer, "from_server"))
    save()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    save()
    async with server:
        await stop
    save()


asyncio.run(main())
