"""The processes the network benches start: our hosts, and the bare baselines (relays and hosts).
The teammates are in bench/swarm.py, or in the bench's own process.

Run by the benches as `python bench/peers.py ROLE [options]`; each prints one JSON line when it
is ready (its address, or the share link), then answers one JSON line for each JSON command line
on stdin, and exits when stdin closes (so nothing outlives a bench that died).

Roles:
- `host`: our host (`tunnel.host.Host`, end-to-end encrypted channels) whose channels run the
  bench protocol below; `--framing picows` dials the relay with picows.
- `session-host`: our host as `tunnel host` serves a session: a `SessionChannelHandler` per
  channel over one log (the SQLite file `tunnel host` writes, opened as it opens it:
  `open_host_store`), the demo agent's session, presence, and the host's broadcast
  (`Broadcaster`: the live tail and presence sealed once and cast to every joined channel);
  command `append` appends items as the agent's output is (a `Recorder` on the log), command
  `casts` says how many casts the broadcast has sent.
- `share-host`: `tunnel host` itself (`run_share`: the log in SQLite, one demo agent declared
  per conversation, the console to /dev/null) running `--conversations` conversations, the
  first as it starts and the others as a driver's `new_conversation` starts them; it prints its
  view link and the conversations' ids. Command `append` appends items to every conversation
  (or those it names) at once, as each one's agent output is (a `Recorder` each), each item's
  text starting with its conversation's id and `|`; `members` counts the teammates attached to
  all of them, `casts` the casts each conversation's broadcast has sent. `--list-interval`
  changes how often a channel may be sent the `conversations` list (an experiment).
- `bare-relay` (`--uvloop`: on uvloop's event loop): a websockets server, no mux, no crypto:
  `/host` takes one host, `/attach` any number of teammates; a host message goes to every
  teammate (one teammate: awaited send, so the relay has backpressure; more:
  `websockets.broadcast`), a teammate message to the host.
- `picows-relay` (`--uvloop` too): the same relay for one host and one teammate on picows,
  each message sent from picows' read buffer; a full socket stops reading the other one.
- `bare-host` (`--uvloop` too): a websockets client of `bare-relay` running the bench protocol;
  command `append` sends messages, each once, for the relay to broadcast.
- `tcp-relay`, `tcp-host`: the floor: plain asyncio TCP, a 4-byte length before each message;
  the relay pairs one host with one teammate and copies bytes both ways.

The bench protocol, run by each host: a JSON control message from the teammate, then
- `{"op": "send", "n": N, "size": S}`: the host sends N messages of S bytes;
- `{"op": "sink", "n": N}`: the host reads N messages, then sends b"done";
- `{"op": "echo", "n": N}`: the host sends back each of the next N messages.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, broadcast, serve
from websockets.exceptions import ConnectionClosed

Receive = Callable[[], Awaitable[bytes]]
Send = Callable[[bytes], Awaitable[None]]
Commands = dict[str, Callable[..., Awaitable[dict[str, Any]]]]

DONE = b"done"
CONVERSATION = "main"


def say(**answer: Any) -> None:
    print(json.dumps(answer), flush=True)


def control(op: str, **fields: Any) -> bytes:
    """A bench protocol control message."""
    return json.dumps({"op": op, **fields}).encode()


async def serve_bench(receive: Receive, send: Send) -> None:
    """The host side of the bench protocol, until `receive` raises."""
    while True:
        command = json.loads(await receive())
        count = int(command["n"])
        if command["op"] == "send":
            payload = bytes(int(command["size"]))
            for _ in range(count):
                await send(payload)
        elif command["op"] == "sink":
            for _ in range(count):
                await receive()
            await send(DONE)
        elif command["op"] == "echo":
            for _ in range(count):
                await send(await receive())


async def command_loop(commands: Commands) -> None:
    """Answer JSON command lines from stdin until it closes."""
    while True:
        line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        if not line:
            return
        command = json.loads(line)
        try:
            answer = await commands[command.pop("cmd")](**command)
        except Exception as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        say(**answer)


async def until_stdin_closes(
    main: Callable[[anyio.abc.TaskGroup], Coroutine[Any, Any, None]], commands: Commands
) -> None:
    """Run `main` and the command loop; stop everything when stdin closes or at SIGTERM or
    SIGINT, returning normally (so that a profiler around the process writes its output)."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(main, tg)
        tg.start_soon(stop_at_signal, tg.cancel_scope)
        await command_loop(commands)
        tg.cancel_scope.cancel()


def run_peer(
    main: Callable[[anyio.abc.TaskGroup], Coroutine[Any, Any, None]],
    commands: Commands,
    *,
    uvloop: bool = False,
) -> None:
    """`until_stdin_closes(main, commands)` on asyncio's event loop, or uvloop's."""
    anyio.run(until_stdin_closes, main, commands, backend_options={"use_uvloop": uvloop})


async def stop_at_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            scope.cancel()
            return


# -- our host -------------------------------------------------------------------------------------


def run_host(args: argparse.Namespace) -> None:
    from tunnel.host import Host, HostSettings
    from tunnel.host.channel import HostChannel
    from tunnel.link import ChannelClosedError

    async def handler(channel: HostChannel) -> None:
        try:
            await serve_bench(channel.receive, channel.send)
        except ChannelClosedError:
            return

    async def main(tg: anyio.abc.TaskGroup) -> None:
        settings = HostSettings(
            relay_url=args.relay, key_file=Path(args.workdir) / "host_key", framing=args.framing
        )
        host = Host(settings, handler)
        await tg.start(host.run)
        say(link=str(host.view_link))

    anyio.run(until_stdin_closes, main, {})


def run_session_host(args: argparse.Namespace) -> None:
    from tunnel.agents import create_session
    from tunnel.agents.recorder import Recorder
    from tunnel.app.host_messages import BroadcastStart, parse
    from tunnel.host import Host, HostSettings
    from tunnel.host.broadcast import Broadcaster
    from tunnel.host.channel import HostChannel
    from tunnel.host.presence import Presence
    from tunnel.host.session import ReplayBudget, SessionChannelHandler
    from tunnel.link import ChannelClosedError
    from tunnel.log import Log
    from tunnel.log.sqlite import open_host_store

    workdir = Path(args.workdir)
    # As tunnel/host/share.py opens the log; the store is opened in `main`, in the event loop.
    logs: list[Log] = []
    sessions: list[Any] = []
    recorders: list[Recorder] = []
    presence = Presence()
    replay = ReplayBudget()
    # Built in `main` once the host is (it signs with the host's key), before any channel opens.
    casting: list[Broadcaster] = []

    async def handler(channel: HostChannel) -> None:
        handler = SessionChannelHandler(
            channel,
            session=sessions[0],
            log=logs[0],
            presence=presence,
            replay=replay,
            broadcast=casting[0],
        )
        try:
            await handler.run()
        except ChannelClosedError:
            return

    async def main(tg: anyio.abc.TaskGroup) -> None:
        log = Log(await open_host_store(workdir / "host-log.db"))
        session = create_session("demo", log, workspace=workdir, conversation_id=CONVERSATION)
        logs.append(log)
        sessions.append(session)
        # What the agent's output goes through (tunnel/agents/recorder.py), beside the session's,
        # its writer running as a session runs it.
        recorder = Recorder(log, CONVERSATION)
        recorders.append(recorder)
        await tg.start(session.run)
        await tg.start(recorder.writer.run)
        settings = HostSettings(relay_url=args.relay, key_file=workdir / "host_key")
        # As tunnel/host/share.py: the host first, then its broadcast, started before the link.
        host = Host(settings, handler)
        broadcast = Broadcaster(
            identity=host.identity,
            log=log,
            conversation_id=session.conversation_id,
            presence=presence,
            link=lambda: host.link,
        )
        casting.append(broadcast)
        await tg.start(broadcast.run)
        await tg.start(host.run)
        say(link=str(host.view_link))

    async def append(count: int, size: int) -> dict[str, Any]:
        text = "x" * size
        start = time.monotonic()
        for _ in range(count):
            # Queued as the agent's output is (Recorder.record): committed in groups.
            await recorders[0].record("message", {"role": "agent", "text": text})
        return {"t0": start, "t1": time.monotonic()}

    async def members() -> dict[str, Any]:
        return {"members": len(presence.members())}

    async def casts() -> dict[str, Any]:
        # The counter the next cast will carry: casts sent so far in this epoch.
        start = parse(casting[0].start_message(you=0))
        assert isinstance(start, BroadcastStart)
        return {"casts": start.counter}

    run_peer(main, {"append": append, "members": members, "casts": casts})


def run_share_host(args: argparse.Namespace) -> None:
    from rich.console import Console

    from tunnel.agents.recorder import Recorder
    from tunnel.app.host_messages import BroadcastStart, parse
    from tunnel.host.conversations import Conversations
    from tunnel.host.settings import HostSettings
    from tunnel.host.share import Shared, ShareSettings, _Parts, run_share

    workdir = Path(args.workdir)
    count = args.conversations
    if args.list_interval is not None:
        # An experiment, not how `tunnel host` runs: how often each channel may be sent the
        # `conversations` list (read at each send).
        import tunnel.host.session

        tunnel.host.session.CONVERSATIONS_INTERVAL = args.list_interval
    # `tunnel host --agent a0=demo ... --agent aK=demo --max-conversations K`, no prompt line;
    # its console, which shows the first conversation as `tunnel host` does, to /dev/null.
    settings = ShareSettings(
        host=HostSettings(relay_url=args.relay, key_file=workdir / "host_key"),
        workspace=workdir,
        log_db=workdir / "host-log.db",
        conversation_id=CONVERSATION,
        interactive=False,
        agents=tuple((f"a{index}", "demo") for index in range(count)),
        max_conversations=max(count, 1),
    )
    devnull = Path("/dev/null").open("w")  # noqa: SIM115 (open as long as the process)
    console = Console(file=devnull, highlight=False)
    # Filled in `main` once the share runs: each open conversation's recorder, by id.
    recorders: dict[str, Recorder] = {}
    running: list[Conversations] = []

    async def main(tg: anyio.abc.TaskGroup) -> None:
        shared: Shared = await tg.start(functools.partial(run_share, settings, console=console))
        conversations = shared.conversations
        assert conversations is not None
        running.append(conversations)
        # The rest as a driver's `new_conversation` starts them (SessionChannelHandler._manage).
        for index in range(1, count):
            await conversations.start(f"a{index}", by="bench")
        for conversation in conversations.open_conversations():
            # What the agent's output goes through (tunnel/agents/recorder.py), beside the
            # session's own, its writer running as a session runs it.
            recorder = recorders[conversation.id] = Recorder(shared.log, conversation.id)
            await tg.start(recorder.writer.run)
        say(link=str(shared.host.view_link), conversations=list(recorders))

    async def append(
        count: int, size: int, conversations: list[str] | None = None
    ) -> dict[str, Any]:
        async def burst(conversation_id: str, recorder: Recorder) -> None:
            # Tagged with its conversation: a teammate tells an item of another one.
            tag = f"{conversation_id}|"
            text = tag + "x" * max(0, size - len(tag))
            for _ in range(count):
                await recorder.record("message", {"role": "agent", "text": text})

        start = time.monotonic()
        async with anyio.create_task_group() as tg:
            for conversation_id, recorder in recorders.items():
                if conversations is None or conversation_id in conversations:
                    tg.start_soon(burst, conversation_id, recorder)
        return {"t0": start, "t1": time.monotonic()}

    async def members() -> dict[str, Any]:
        attached = sum(
            member.role != "host"
            for conversation in running[0].open_conversations()
            for member in conversation.presence.members()
        )
        return {"members": attached}

    async def casts() -> dict[str, Any]:
        # The counter the next cast of each conversation will carry: casts sent so far.
        counters: dict[str, int] = {}
        for conversation in running[0].open_conversations():
            parts = conversation.parts
            assert isinstance(parts, _Parts)
            start = parse(parts.broadcast.start_message(you=0))
            assert isinstance(start, BroadcastStart)
            counters[conversation.id] = start.counter
        return {"casts": counters}

    try:
        run_peer(main, {"append": append, "members": members, "casts": casts})
    finally:
        devnull.close()


# -- the bare websockets baseline -----------------------------------------------------------------


def run_bare_relay(args: argparse.Namespace) -> None:
    host: ServerConnection | None = None
    host_here = asyncio.Event()  # asyncio's: made before the loop runs
    # One entry per connected teammate; bounded by the bench's number of clients.
    teammates: set[ServerConnection] = set()

    async def handle(websocket: ServerConnection) -> None:
        nonlocal host
        assert websocket.request is not None
        if websocket.request.path == "/host":
            host = websocket
            host_here.set()
            async for message in websocket:
                targets = list(teammates)
                if len(targets) == 1:
                    await targets[0].send(message)
                else:
                    broadcast(targets, message)
            return
        teammates.add(websocket)
        try:
            if args.greet:
                await websocket.send(b"hello")
            async for message in websocket:
                await host_here.wait()
                assert host is not None
                await host.send(message)
        finally:
            teammates.discard(websocket)

    async def main(tg: anyio.abc.TaskGroup) -> None:
        async with serve(handle, "127.0.0.1", 0, compression=None, max_size=None) as server:
            port = server.sockets[0].getsockname()[1]
            say(url=f"ws://127.0.0.1:{port}")
            await anyio.sleep_forever()

    async def clients() -> dict[str, Any]:
        return {"teammates": len(teammates)}

    run_peer(main, {"clients": clients}, uvloop=args.uvloop)


def run_picows_relay(args: argparse.Namespace) -> None:
    from picows import (
        WSCloseCode,
        WSFrame,
        WSListener,
        WSMsgType,
        WSTransport,
        WSUpgradeRequest,
        ws_create_server,
    )

    class End(WSListener):
        """One of the two sockets: what arrives goes to the other, whose full socket pauses
        reading this one."""

        def __init__(self, ends: dict[str, End], name: str) -> None:
            self.ends, self.name = ends, name
            self.transport: WSTransport | None = None

        def other(self) -> End | None:
            return self.ends.get("attach" if self.name == "host" else "host")

        def on_ws_connected(self, transport: WSTransport) -> None:
            self.transport = transport
            self.ends[self.name] = self

        def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
            if frame.msg_type == WSMsgType.BINARY:
                other = self.other()
                if other is not None and other.transport is not None:
                    other.transport.send(WSMsgType.BINARY, frame.get_payload_as_memoryview())
            elif frame.msg_type == WSMsgType.CLOSE:
                transport.send_close(WSCloseCode.OK)
                transport.disconnect()

        def on_ws_disconnected(self, transport: WSTransport) -> None:
            if self.ends.get(self.name) is self:
                del self.ends[self.name]

        def pause_writing(self) -> None:
            other = self.other()
            if other is not None and other.transport is not None:
                other.transport.underlying_transport.pause_reading()

        def resume_writing(self) -> None:
            other = self.other()
            if other is not None and other.transport is not None:
                other.transport.underlying_transport.resume_reading()

    ends: dict[str, End] = {}

    def listener(request: WSUpgradeRequest) -> WSListener:
        return End(ends, "host" if request.path == b"/host" else "attach")

    async def main(tg: anyio.abc.TaskGroup) -> None:
        server = await ws_create_server(
            listener, "127.0.0.1", 0, max_frame_size=1 << 30, use_aiofastnet=False
        )
        port = server.sockets[0].getsockname()[1]
        say(url=f"ws://127.0.0.1:{port}")
        try:
            await anyio.sleep_forever()
        finally:
            server.close()

    run_peer(main, {}, uvloop=args.uvloop)


def run_bare_host(args: argparse.Namespace) -> None:
    connected: list[ClientConnection] = []

    async def main(tg: anyio.abc.TaskGroup) -> None:
        async with connect(f"{args.url}/host", compression=None, max_size=None) as websocket:
            connected.append(websocket)
            say(ready=True)

            async def receive() -> bytes:
                message = await websocket.recv()
                assert isinstance(message, bytes)
                return message

            try:
                await serve_bench(receive, websocket.send)
            except ConnectionClosed:
                return

    async def append(count: int, size: int) -> dict[str, Any]:
        payload = bytes(size)
        start = time.monotonic()
        for _ in range(count):
            await connected[0].send(payload)
        return {"t0": start, "t1": time.monotonic()}

    run_peer(main, {"append": append}, uvloop=args.uvloop)


# -- the TCP floor --------------------------------------------------------------------------------


class Framed:
    """Messages over a TCP stream: a 4-byte big-endian length, then the bytes."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self._buffer = BufferedByteReceiveStream(stream)

    async def send(self, message: bytes) -> None:
        await self.stream.send(len(message).to_bytes(4, "big") + message)

    async def receive(self) -> bytes:
        size = int.from_bytes(await self._buffer.receive_exactly(4), "big")
        return await self._buffer.receive_exactly(size)


def run_tcp_relay(args: argparse.Namespace) -> None:
    # Hosts waiting for a teammate; bounded by the bench's one host.
    waiting_send, waiting = anyio.create_memory_object_stream[
        tuple[anyio.abc.SocketStream, anyio.Event]
    ](8)

    async def pump(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream) -> None:
        try:
            async for chunk in source:
                await sink.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            await sink.aclose()

    async def handle(stream: anyio.abc.SocketStream) -> None:
        role = await stream.receive(1)
        if role == b"H":
            done = anyio.Event()
            await waiting_send.send((stream, done))
            await done.wait()
            return
        host, done = await waiting.receive()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(pump, host, stream)
                tg.start_soon(pump, stream, host)
        finally:
            done.set()

    async def main(tg: anyio.abc.TaskGroup) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        say(port=listener.extra(anyio.abc.SocketAttribute.local_port))
        await listener.serve(handle)

    anyio.run(until_stdin_closes, main, {})


def run_tcp_host(args: argparse.Namespace) -> None:
    async def main(tg: anyio.abc.TaskGroup) -> None:
        stream = await anyio.connect_tcp("127.0.0.1", args.port)
        await stream.send(b"H")
        say(ready=True)
        framed = Framed(stream)
        try:
            await serve_bench(framed.receive, framed.send)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
            return

    anyio.run(until_stdin_closes, main, {})


OUR_HOSTS = frozenset({"host", "session-host", "share-host"})
"""The roles that stand for `tunnel host`: they set the C allocator's thresholds first, as it does
(tunnel/process/allocator.py)."""

ROLES: dict[str, Callable[[argparse.Namespace], None]] = {
    "host": run_host,
    "session-host": run_session_host,
    "share-host": run_share_host,
    "bare-relay": run_bare_relay,
    "picows-relay": run_picows_relay,
    "bare-host": run_bare_host,
    "tcp-relay": run_tcp_relay,
    "tcp-host": run_tcp_host,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--relay", help="our relay's http:// URL (host, session-host)")
    parser.add_argument("--workdir", help="where our host keeps its key")
    parser.add_argument(
        "--conversations", type=int, default=1, help="share-host: conversations it runs"
    )
    parser.add_argument(
        "--list-interval",
        type=float,
        help="share-host: seconds between two `conversations` lists to a channel, at least",
    )
    parser.add_argument(
        "--framing",
        choices=("websockets", "picows"),
        default="websockets",
        help="host: the WebSocket library it dials our relay with",
    )
    parser.add_argument(
        "--glibc-defaults",
        action="store_true",
        help="our hosts: leave the C allocator's thresholds at glibc's (bench/allocator_bench.py)",
    )
    parser.add_argument("--url", help="the bare relay's ws:// URL")
    parser.add_argument("--port", type=int, help="the TCP relay's port")
    parser.add_argument("--greet", action="store_true", help="bare relay: greet each teammate")
    parser.add_argument(
        "--uvloop", action="store_true", help="bare relay and host: run on uvloop's event loop"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.role in OUR_HOSTS and not args.glibc_defaults:
        from tunnel.process.allocator import keep_freed_memory

        keep_freed_memory()
    ROLES[args.role](args)


if __name__ == "__main__":
    main()
