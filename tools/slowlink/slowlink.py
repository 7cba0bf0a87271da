#!/usr/bin/python3
"""slowlink.py - a TCP proxy that makes a link slow: every byte it forwards, in
either direction, leaves it --delay-ms after it arrived (a fixed one-way latency
added to the link's own; throughput is not limited: chunks in flight overlap,
order is kept). Optionally the link also stalls: about every --stall-every-s
seconds (at random, seeded), both directions stop for --stall-ms, as a congested
or flapping link does. No emulated delay module (netem) is needed: it runs
wherever a process can listen, on loopback or between network namespaces.

  slowlink.py --listen HOST:PORT --to HOST:PORT --delay-ms D
              [--stall-ms S --stall-every-s T] [--seed N]

PORT 0 for --listen takes any free port. Once it listens it prints one line,
"slowlink: listening on HOST:PORT", on stdout (and flushes), so a test can wait
for it and read the port. On SIGTERM or SIGINT it closes every connection and
exits 0, after printing the bytes it forwarded each way on stderr. Standard
library only (run it with /usr/bin/python3).
"""
import argparse
import asyncio
import random
import signal
import sys
import time

CHUNK = 65536


class Link:
    """Settings shared by every connection, and the stall clock."""

    def __init__(self, args):
        self.delay = args.delay_ms / 1000.0
        self.stall = args.stall_ms / 1000.0
        self.every = args.stall_every_s
        self.rng = random.Random(args.seed)
        self.stall_until = 0.0
        self.bytes = {"up": 0, "down": 0}

    async def stall_clock(self):
        """Start a stall of self.stall seconds at random, about every self.every seconds."""
        while True:
            await asyncio.sleep(self.rng.expovariate(1.0 / self.every))
            self.stall_until = time.monotonic() + self.stall


async def read_side(reader, queue, link):
    """Read chunks as they come and queue each with the time it may leave; None = EOF."""
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            await queue.put((time.monotonic() + link.delay, data))
    except (ConnectionError, OSError):
        pass
    await queue.put(None)


async def write_side(writer, queue, link, direction):
    """Forward queued chunks once due (and no stall holds the link); half-close at EOF."""
    try:
        while True:
            item = await queue.get()
            if item is None:
                if writer.can_write_eof():
                    writer.write_eof()
                break
            due, data = item
            while True:
                wait = max(due, link.stall_until) - time.monotonic()
                if wait <= 0:
                    break
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
            link.bytes[direction] += len(data)
    except (ConnectionError, OSError):
        pass


async def serve_one(link, target, c_reader, c_writer):
    """One client connection: connect to the target and pump both ways until both end."""
    host, port = target
    try:
        t_reader, t_writer = await asyncio.open_connection(host, port)
    except OSError:
        c_writer.close()
        return
    up, down = asyncio.Queue(), asyncio.Queue()
    await asyncio.gather(read_side(c_reader, up, link), write_side(t_writer, up, link, "up"),
                         read_side(t_reader, down, link), write_side(c_writer, down, link, "down"))
    for w in (t_writer, c_writer):
        w.close()


def host_port(text):
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT")
    return host, int(port)


async def run(args):
    link = Link(args)
    server = await asyncio.start_server(lambda r, w: serve_one(link, args.to, r, w), *args.listen)
    host, port = server.sockets[0].getsockname()[:2]
    print(f"slowlink: listening on {host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    clock = asyncio.ensure_future(link.stall_clock()) if args.stall_ms > 0 else None
    async with server:
        await stop.wait()
    if clock:
        clock.cancel()
    print(f"slowlink: forwarded {link.bytes['up']} bytes up, {link.bytes['down']} bytes down", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", type=host_port, required=True, help="HOST:PORT to accept on (PORT 0: any)")
    ap.add_argument("--to", type=host_port, required=True, help="HOST:PORT to forward to")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="added one-way delay, each direction")
    ap.add_argument("--stall-ms", type=float, default=0.0, help="length of a stall (0: no stalls)")
    ap.add_argument("--stall-every-s", type=float, default=10.0, help="mean time between stalls")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.delay_ms < 0 or args.stall_ms < 0 or args.stall_every_s <= 0:
        ap.error("--delay-ms and --stall-ms must be >= 0, --stall-every-s > 0")
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
