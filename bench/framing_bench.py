"""The relay's hot path on each WebSocket library and event loop: forwarding binary messages from
one connection to another, measured in the same run.

Run: .venv/bin/python bench/framing_bench.py [--pairs 5] [--size 4K --size 64K] [--mib 64]

Each variant is a relay process that forwards every binary message arriving on `/in` to the
connection on `/out`, with backpressure (a full `/out` stops reading `/in`):
- websockets: python-websockets, `async for` and `send()`, as the bare relay of relay_bench.py;
- seam: python-websockets reading, writing through tunnel/link/framing.py as a link does (a
  write while the socket takes more, a wait for it to drain once it is backed up);
- seam-picows: the same through tunnel/link/framing_picows.py (`PicowsFraming`: picows reads,
  the seam writes), as `tunnel relay --framing picows` does;
- picows: picows (needs `pip install picows`), the payload sent from its read buffer.
Each on asyncio's loop and on uvloop's (needs uvloop; the `bench` extra). The load comes from
this process, the same for every variant: a sender and a receiver on picows and uvloop, so the
variants differ only in the relay. Prints MiB/s and the relay's CPU seconds per MiB, median and
[min-max] over the pairs (variants in turn, order reversed every other pair), and each variant's
ratio to websockets on asyncio.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

from harness import Samples, cpu_seconds, human_size, parse_size, print_table

VARIANTS = (
    ("websockets", "asyncio"),
    ("seam", "asyncio"),
    ("seam-picows", "asyncio"),
    ("picows", "asyncio"),
    ("websockets", "uvloop"),
    ("seam", "uvloop"),
    ("seam-picows", "uvloop"),
    ("picows", "uvloop"),
)


# -- the relay processes --------------------------------------------------------------------------


async def serve_websockets(seam: bool) -> None:
    from websockets.asyncio.server import ServerConnection, serve

    from tunnel.link.framing import WebsocketsFraming

    out: list[ServerConnection] = []

    async def handler(websocket: ServerConnection) -> None:
        if websocket.request is not None and websocket.request.path == "/out":
            out[:] = [websocket]
            await websocket.wait_closed()
            return
        sink = out[0]
        framing = WebsocketsFraming(sink)
        async for message in websocket:
            if seam:
                # As a link writes: at once, and through the guard only to wait for a drain.
                if framing.backed_up():
                    async with framing.write_guard():
                        pass
                framing.write_messages([message])  # type: ignore[list-item]
            else:
                await sink.send(message)

    async with serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(port, flush=True)
        await asyncio.Future()


async def serve_picows() -> None:
    from picows import WSListener, WSMsgType, WSTransport, WSUpgradeRequest, ws_create_server

    out: list[WSTransport] = []
    sources: list[WSTransport] = []

    class Sink(WSListener):  # type: ignore[misc]
        def on_ws_connected(self, transport: WSTransport) -> None:
            out[:] = [transport]

        def pause_writing(self) -> None:
            for source in sources:
                source.underlying_transport.pause_reading()

        def resume_writing(self) -> None:
            for source in sources:
                source.underlying_transport.resume_reading()

    class Source(WSListener):  # type: ignore[misc]
        def on_ws_connected(self, transport: WSTransport) -> None:
            sources[:] = [transport]

        def on_ws_frame(self, transport: WSTransport, frame: object) -> None:
            if frame.msg_type == WSMsgType.BINARY:  # type: ignore[attr-defined]
                out[0].send(WSMsgType.BINARY, frame.get_payload_as_memoryview())  # type: ignore[attr-defined]
            elif frame.msg_type == WSMsgType.CLOSE:  # type: ignore[attr-defined]
                transport.send_close(frame.get_close_code())  # type: ignore[attr-defined]
                transport.disconnect()

    def listener(request: WSUpgradeRequest) -> WSListener:
        return Sink() if request.path == b"/out" or request.path == "/out" else Source()

    server = await ws_create_server(listener, "127.0.0.1", 0, max_frame_size=1 << 24)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Future()


async def serve_seam_picows() -> None:
    from picows import WSUpgradeRequest

    from tunnel.link.framing_picows import PicowsFraming, create_server

    out: list[PicowsFraming] = []

    async def forward(source: PicowsFraming) -> None:
        sink = out[0]
        async for message in source.messages():
            # As a link writes: at once, and through the guard only to wait for a drain.
            if sink.backed_up():
                async with sink.write_guard():
                    pass
            sink.write_messages([message])  # type: ignore[list-item]

    tasks: set[asyncio.Task[None]] = set()  # one per connection of the bench: a few

    def connected(path: bytes, framing: PicowsFraming) -> None:
        if path == b"/out":
            out[:] = [framing]
            return
        task = asyncio.get_running_loop().create_task(forward(framing))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def listener(request: WSUpgradeRequest) -> PicowsFraming:
        return PicowsFraming(
            max_size=None, on_connected=lambda framing: connected(request.path, framing)
        )

    # As the relay serves (tunnel/relay/server_picows.py).
    server = await create_server(listener, "127.0.0.1", 0, max_size=1 << 24)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Future()


def serve(library: str, loop: str) -> None:
    if library == "picows":
        main = serve_picows()
    elif library == "seam-picows":
        main = serve_seam_picows()
    else:
        main = serve_websockets(library == "seam")
    if loop == "uvloop":
        import uvloop

        uvloop.run(main)
    else:
        asyncio.run(main)


# -- the load -------------------------------------------------------------------------------------


async def forward(port: int, size: int, count: int) -> float:
    """Send `count` messages of `size` bytes through the relay on `port`; seconds taken."""
    from picows import WSCloseCode, WSListener, WSMsgType, WSTransport, ws_connect

    done = asyncio.get_running_loop().create_future()
    writable = asyncio.Event()
    writable.set()

    class Receiver(WSListener):  # type: ignore[misc]
        received = 0

        def on_ws_frame(self, transport: WSTransport, frame: object) -> None:
            if frame.msg_type == WSMsgType.BINARY:  # type: ignore[attr-defined]
                self.received += 1
                if self.received == count and not done.done():
                    done.set_result(None)

    class Sender(WSListener):  # type: ignore[misc]
        def pause_writing(self) -> None:
            writable.clear()

        def resume_writing(self) -> None:
            writable.set()

    url = f"ws://127.0.0.1:{port}"
    receiver, _ = await ws_connect(Receiver, f"{url}/out", max_frame_size=1 << 24)
    await asyncio.sleep(0.05)  # the relay has registered /out before anything arrives
    sender, _ = await ws_connect(Sender, f"{url}/in", max_frame_size=1 << 24)
    payload = os.urandom(size)
    start = time.perf_counter()
    for _ in range(count):
        if not writable.is_set():
            await writable.wait()
        sender.send(WSMsgType.BINARY, payload)
    await asyncio.wait_for(done, 120)
    seconds = time.perf_counter() - start
    for transport in (sender, receiver):
        transport.send_close(WSCloseCode.OK)
        transport.disconnect()
    return seconds


@dataclass
class Relay:
    name: str
    process: subprocess.Popen[str]
    port: int


@contextlib.contextmanager
def relays() -> Iterator[list[Relay]]:
    started: list[Relay] = []
    try:
        for library, loop in VARIANTS:
            process = subprocess.Popen(
                [sys.executable, __file__, "--serve", library, "--loop", loop],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert process.stdout is not None
            started.append(Relay(f"{library}/{loop}", process, int(process.stdout.readline())))
        yield started
    finally:
        for relay in started:
            relay.process.terminate()
            relay.process.wait(10)


async def bench(pairs: int, sizes: list[int], mib: float) -> None:
    samples: dict[str, dict[str, Samples]] = {}
    with relays() as started:
        for size in sizes:
            count = max(1, int(mib * 1024 * 1024 / size))
            megabytes = count * size / (1024 * 1024)
            for relay in started:  # warm-up, not recorded
                await forward(relay.port, size, max(1, count // 10))
            for pair in range(pairs):
                order = started if pair % 2 == 0 else started[::-1]
                for relay in order:
                    before = cpu_seconds(relay.process.pid)
                    seconds = await forward(relay.port, size, count)
                    cpu = cpu_seconds(relay.process.pid) - before
                    label = human_size(size)
                    for measure, value in (
                        (f"{label} MiB/s", megabytes / seconds),
                        (f"{label} relay CPU ms/MiB", cpu * 1e3 / megabytes),
                    ):
                        samples.setdefault(measure, {}).setdefault(relay.name, Samples()).add(value)
    names = [f"{library}/{loop}" for library, loop in VARIANTS]
    rows = []
    for measure, by_name in samples.items():
        base = by_name["websockets/asyncio"].median
        for name in names:
            median = by_name[name].median
            ratio = f"{median / base:.2f}" if base else "-"
            rows.append([measure, name, by_name[name].spread(".1f"), ratio])
    print_table(
        f"relay hot path, {pairs} pairs, {mib:g} MiB per run: median [min-max]",
        ["measure", "relay", "value", "/ websockets on asyncio"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5, help="rounds over the variants")
    parser.add_argument("--size", action="append", type=parse_size, help="message size")
    parser.add_argument("--mib", type=float, default=64, help="MiB per run")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--loop", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.loop)
        return
    import uvloop

    uvloop.run(bench(args.pairs, args.size or [4096, 65536], args.mib))


if __name__ == "__main__":
    main()
