#!/usr/bin/env python3
"""A loopback TCP relay that counts the bytes a server sends (what its clients read).

relay.py LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT COUNT_FILE
The count (bytes from the server, bytes to the server) is written to COUNT_FILE after every
connection closes and on SIGTERM. Standard library only."""
import asyncio, signal, sys

listen_port, host, port, count_file = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
counts = {"from_server": 0, "to_server": 0}


def save():
    with open(count_file, "w") as f:
        f.write(f"{counts['from_server']} {counts['to_server']}\n")


async def pipe(reader, writer, key):
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            counts[key] += len(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
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
