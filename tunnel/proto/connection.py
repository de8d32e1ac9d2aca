"""The link protocol object: one per WebSocket, sans I/O.

Feed it each received WebSocket message with `receive_data`, call its methods to open, send on,
acknowledge and close channels, and after every call collect `events_received()` and
`data_to_send()`. It never touches a socket, a task or a clock (docs/protocol.md).

Buffers: `data_to_send()` holds what the caller queued since it last drained it; `data` frames in
it are bounded by the send windows (at most `initial_window` per channel), and control frames by
one `window` per half window acknowledged and one `close` per channel. `events_received()` holds at
most one event per `receive_data` call not yet drained.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from tunnel.proto.codes import CloseCode
from tunnel.proto.errors import (
    FlowControlError,
    LimitError,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
)
from tunnel.proto.events import (
    CastCut,
    CastJoined,
    CastParted,
    CastReceived,
    ChannelClosed,
    ChannelOpened,
    DataReceived,
    Event,
    HelloReceived,
    Payload,
    WindowUpdated,
)
from tunnel.proto.frames import (
    MAX_CHANNEL_ID,
    MAX_CLOSE_CODE,
    MIN_CLOSE_CODE,
    Cast,
    Close,
    Cut,
    Data,
    Frame,
    Hello,
    Join,
    Open,
    Part,
    Window,
    cast_head,
    check_group,
    data_head,
    decode_frame,
    encode_frame,
    fast_form_fits,
    payload_at,
)
from tunnel.proto.limits import DEFAULT_LIMITS, Limits
from tunnel.proto.states import Action, ChannelState, Input, transition
from tunnel.proto.values import check_map, check_str

Outgoing: TypeAlias = bytes | tuple[bytes, Payload]
"""One WebSocket binary message to send: bytes, or (head, data) for the message that is `head`
followed by `data` (a `data` or `cast` frame), which a WebSocket layer may write as two pieces
so `data` is never copied into a message of its own."""


class Side(enum.Enum):
    """Which end of the WebSocket we are; it decides the parity of the ids we open."""

    DIALER = "dialer"
    """The WebSocket client: opens odd channel ids (1, 3, 5, ...)."""

    ACCEPTER = "accepter"
    """The WebSocket server: opens even channel ids (2, 4, 6, ...); 0 is never used."""


@dataclass(slots=True, kw_only=True)
class _Channel:
    state: ChannelState
    ours: bool
    """We opened it (it counts against our share of `max_channels`)."""
    send_window: int
    """Bytes of `d` we may still send before the peer grants more."""
    recv_window: int
    """Bytes of `d` the peer may still send before we grant more."""
    unacked: int = 0
    """Bytes received and reported but not yet acknowledged by the application."""
    consumed: int = 0
    """Bytes acknowledged since our last `window` grant."""


class Connection:
    """The state of one link: hello exchange, channels and their flow-control windows.

    Any `RemoteProtocolError` fails the whole link, channel-level violations included: the caller
    closes the WebSocket with `error.code`, and every later call raises `LocalProtocolError`.
    A `LocalProtocolError` from a misused call changes nothing.
    """

    def __init__(
        self, side: Side, *, limits: Limits = DEFAULT_LIMITS, payload_views: bool = False
    ) -> None:
        """`payload_views`: report received data as memoryviews into the received message, not
        copies (a relay passes them to `send_data` of another connection unchanged)."""
        self._side = side
        self._views = payload_views
        self._use_limits(limits)
        self._channels: dict[int, _Channel] = {}
        self._ours = 0
        self._theirs = 0
        self._first_id = 1 if side is Side.DIALER else 2
        self._next_id = self._first_id
        self._hello_sent = False
        self._hello_received = False
        self._failure: ProtocolError | None = None
        # Both hellos done and no failure: what `_check_ready` checks, kept in one flag so that
        # the calls made per message test one attribute, not three.
        self._ready = False
        self._events: list[Event] = []
        self._outgoing: list[Outgoing] = []

    # --- introspection --------------------------------------------------------------------

    @property
    def side(self) -> Side:
        """Which end of the WebSocket we are."""
        return self._side

    @property
    def limits(self) -> Limits:
        """The limits enforced on what the peer sends and on what we send."""
        return self._limits

    def adopt_limits(self, limits: Limits) -> None:
        """Enforce `limits` from now on; only before the first channel is opened.

        Both ends must start channels with the same `initial_window` (docs/protocol.md,
        "Limits"): an endpoint adopts the limits its relay advertised in its hello.
        Raises LocalProtocolError once a channel exists.
        """
        if self._channels or self._next_id != self._first_id:
            raise LocalProtocolError("limits can change only before the first channel")
        self._use_limits(limits)

    def _use_limits(self, limits: Limits) -> None:
        """Take `limits`, and what the per-message paths read of them, worked out once."""
        self._limits = limits
        self._largest_message = limits.largest_data
        # A receiver grants consumed bytes back once half the window was consumed
        # (docs/protocol.md, "Flow control").
        self._half_window = max(1, limits.initial_window // 2)
        self._fast_form = fast_form_fits(limits)

    @property
    def failure(self) -> ProtocolError | None:
        """The error that failed the link, or `None` while it is usable."""
        return self._failure

    @property
    def open_channels(self) -> int:
        """Channels whose id is in use: OPEN or CLOSE_SENT, opened by either side."""
        return len(self._channels)

    def channel_state(self, channel: int) -> ChannelState | None:
        """Return the state of `channel`, or `None` if it is gone or never existed."""
        if self._failure is not None:
            self._check_usable()
        found = self._channels.get(channel)
        return found.state if found is not None else None

    def send_window(self, channel: int) -> int:
        """Return how many bytes of data we may send on `channel` now (0 unless it is OPEN)."""
        if self._failure is not None:
            self._check_usable()
        found = self._channels.get(channel)
        if found is None or found.state is not ChannelState.OPEN:
            return 0
        return found.send_window

    # --- output ---------------------------------------------------------------------------

    def events_received(self) -> list[Event]:
        """Return the events produced since the last call, oldest first, and forget them."""
        if self._failure is not None:
            self._check_usable()
        events, self._events = self._events, []
        return events

    def has_data_to_send(self) -> bool:
        """Tell whether `data_to_send()` would return messages; cheap, and never raises."""
        return self._failure is None and bool(self._outgoing)

    def data_to_send(self) -> list[bytes]:
        """Return the WebSocket binary messages to send, in order, and forget them."""
        return [
            message if isinstance(message, bytes) else b"".join(message)
            for message in self.data_to_write()
        ]

    def data_to_write(self) -> list[Outgoing]:
        """Return the messages to send as `data_to_send` does, a `data` or `cast` frame as its
        head and its data (`Outgoing`), and forget them: the data is the caller's own, uncopied
        (the memoryview a relay received is written out as it is)."""
        if self._failure is not None:
            self._check_usable()
        outgoing, self._outgoing = self._outgoing, []
        return outgoing

    # --- input ----------------------------------------------------------------------------

    def receive_data(self, message: bytes) -> None:
        """Process one received WebSocket message.

        After calling this method you must call `events_received()` and `data_to_send()`: a
        peer's close is answered automatically.

        Raises `RemoteProtocolError` if the peer broke the protocol; the link has then failed:
        close the WebSocket with `error.code`.
        """
        if self._failure is not None:
            self._check_usable()
        try:
            if self._fast_form and type(message) is bytes:
                limits = self._limits
                found = payload_at(message, limits.max_data_size)
                if found is not None and (
                    limits.max_message_size is None or len(message) <= limits.max_message_size
                ):
                    # A `data` or `cast` frame in the fast form, the bulk of what arrives: no
                    # frame object, and for a relay the data stays in `message`.
                    is_data, channel, at = found
                    data = memoryview(message)[at:] if self._views else message[at:]
                    if is_data:
                        self._receive_fast_data(channel, data)
                    else:
                        self._receive_fast_cast(channel, data)
                    return
            self._handle(decode_frame(message, limits=self._limits))
        except ProtocolError as exc:
            self._failure = exc
            self._ready = False
            raise

    def _handle(self, frame: Frame) -> None:
        if isinstance(frame, Hello):
            if self._hello_received:
                raise RemoteProtocolError("a second hello")
            self._hello_received = True
            self._ready = self._hello_sent
            self._events.append(HelloReceived(payload=frame.payload))
            return
        if not self._hello_received:
            raise RemoteProtocolError("a frame before the hello")
        if not self._hello_sent:
            # The peer may only use channels once it has our hello, so it cannot be ahead of it.
            raise RemoteProtocolError("a channel frame before our hello was sent")
        if isinstance(frame, Cast) and frame.channel is None:
            # A broadcast: the dialer (a host) sends it to the accepter (the relay).
            if self._side is not Side.ACCEPTER:
                raise RemoteProtocolError("a cast without a channel goes to the relay only")
            self._events.append(CastReceived(channel=None, data=frame.data, group=frame.group))
            return
        assert frame.channel is not None
        found = self._channels.get(frame.channel)
        state = found.state if found is not None else None
        if isinstance(frame, Cast | Join | Part | Cut):
            self._receive_broadcast(frame, state, found)
        elif isinstance(frame, Open):
            self._receive_open(frame, state)
        elif isinstance(frame, Data):
            self._receive_data(frame.channel, frame.data, state, found)
        elif isinstance(frame, Window):
            self._receive_window(frame, state, found)
        else:
            self._receive_close(frame, state)

    def _receive_open(self, frame: Open, state: ChannelState | None) -> None:
        outcome = transition(state, Input.RECV_OPEN)
        if frame.channel == 0 or frame.channel % 2 == self._first_id % 2:
            raise RemoteProtocolError("open with a channel id of the wrong parity")
        if self._limits.max_channels is not None and self._theirs >= self._limits.max_channels:
            raise LimitError("too many open channels")
        assert outcome.next is not None
        self._channels[frame.channel] = _Channel(
            state=outcome.next,
            ours=False,
            send_window=self._limits.initial_window,
            recv_window=self._limits.initial_window,
        )
        self._theirs += 1
        self._events.append(ChannelOpened(channel=frame.channel, path=frame.path, meta=frame.meta))

    def _receive_fast_data(self, channel: int, data: Payload) -> None:
        """`_handle` for a `data` frame in the fast form (`payload_at`)."""
        if not self._ready:  # failure is None here: receive_data checked it
            self._check_channel_frame()
        found = self._channels.get(channel)
        self._receive_data(channel, data, found.state if found is not None else None, found)

    def _receive_fast_cast(self, channel: int, data: Payload) -> None:
        """`_handle` for a `cast` frame to a channel in the fast form (`payload_at`)."""
        if not self._ready:  # failure is None here: receive_data checked it
            self._check_channel_frame()
        found = self._channels.get(channel)
        # A view only at a relay, which refuses every cast to a channel (the wrong direction).
        cast = Cast(channel=channel, data=bytes(data) if type(data) is not bytes else data)
        self._receive_broadcast(cast, found.state if found is not None else None, found)

    def _check_channel_frame(self) -> None:
        """What `_handle` checks before any frame but a hello."""
        if not self._hello_received:
            raise RemoteProtocolError("a frame before the hello")
        if not self._hello_sent:
            raise RemoteProtocolError("a channel frame before our hello was sent")

    def _receive_data(
        self, channel: int, data: Payload, state: ChannelState | None, found: _Channel | None
    ) -> None:
        outcome = transition(state, Input.RECV_DATA)
        assert found is not None
        size = len(data)
        if size > found.recv_window:
            raise FlowControlError("data beyond the receive window")
        found.recv_window -= size
        if outcome.action is Action.PROCEED:
            found.unacked += size
            self._events.append(DataReceived(channel=channel, data=data))

    def _receive_broadcast(
        self, frame: Cast | Join | Part | Cut, state: ChannelState | None, found: _Channel | None
    ) -> None:
        # Join and part go from the dialer (a host) to the accepter (the relay); cast to a channel
        # and cut the other way. Within a channel they follow data's rules.
        to_accepter = isinstance(frame, Join | Part)
        if to_accepter != (self._side is Side.ACCEPTER):
            raise RemoteProtocolError("a broadcast frame in the wrong direction")
        outcome = transition(state, Input.RECV_DATA)
        assert found is not None
        if isinstance(frame, Cast):
            size = len(frame.data)
            if size > found.recv_window:
                raise FlowControlError("cast beyond the receive window")
            found.recv_window -= size
            if outcome.action is Action.PROCEED:
                found.unacked += size
        if outcome.action is not Action.PROCEED:
            return
        if isinstance(frame, Cast):
            self._events.append(CastReceived(channel=frame.channel, data=frame.data))
        elif isinstance(frame, Join):
            self._events.append(CastJoined(channel=frame.channel, group=frame.group))
        elif isinstance(frame, Part):
            self._events.append(CastParted(channel=frame.channel))
        else:
            self._events.append(CastCut(channel=frame.channel))

    def _receive_window(
        self, frame: Window, state: ChannelState | None, found: _Channel | None
    ) -> None:
        outcome = transition(state, Input.RECV_WINDOW)
        assert found is not None
        if outcome.action is not Action.PROCEED:
            return
        available = found.send_window + frame.n
        # A receiver only gives back what it consumed, so an honest window never grows past its
        # initial size. A bigger grant would let a peer that reads nothing make us (a relay, say)
        # queue without bound on its behalf: that is the peer breaking flow control.
        if available > self._limits.initial_window:
            raise FlowControlError("window grant beyond the initial window")
        found.send_window = available
        self._events.append(WindowUpdated(channel=frame.channel, available=available))

    def _receive_close(self, frame: Close, state: ChannelState | None) -> None:
        outcome = transition(state, Input.RECV_CLOSE)
        if outcome.action is Action.REPLY:
            self._queue(Close(channel=frame.channel, code=frame.code, reason=""))
        self._forget(frame.channel)
        self._events.append(
            ChannelClosed(channel=frame.channel, code=frame.code, reason=frame.reason)
        )

    # --- our calls ------------------------------------------------------------------------

    def send_hello(self, payload: dict[str, Any]) -> None:
        """Queue our hello; it must be the first frame we send. Then call `data_to_send()`."""
        self._check_usable()
        if self._hello_sent:
            raise LocalProtocolError("hello was already sent")
        check_map(payload, "hello payload", self._limits, remote=False)
        self._queue(Hello(payload=payload), checked=True)
        self._hello_sent = True
        self._ready = self._hello_received

    def open_channel(self, path: str, meta: dict[str, Any]) -> int:
        """Queue an `open` and return the new channel's id; it is OPEN at once.

        Raises `LocalProtocolError` with code `LIMIT_REACHED` if we already have `max_channels`
        channels of our own. Then call `data_to_send()`.
        """
        self._check_ready()
        check_str(path, "path", self._limits, remote=False)
        check_map(meta, "meta", self._limits, remote=False)
        if self._limits.max_channels is not None and self._ours >= self._limits.max_channels:
            raise LocalProtocolError("too many open channels", code=CloseCode.LIMIT_REACHED)
        channel = self._allocate()
        outcome = transition(None, Input.SEND_OPEN)
        assert outcome.next is not None
        self._queue(Open(channel=channel, path=path, meta=meta), checked=True)
        self._channels[channel] = _Channel(
            state=outcome.next,
            ours=True,
            send_window=self._limits.initial_window,
            recv_window=self._limits.initial_window,
        )
        self._ours += 1
        return channel

    def send_data(self, channel: int, data: bytes | bytearray | memoryview) -> bool:
        """Queue `data` as one `data` frame if it fits the send window; else queue nothing.

        Returns False when the window is too small now: wait for `WindowUpdated` and retry.
        Raises `ChannelNotOpenError` if the channel is closing or gone, and `LocalProtocolError`
        if `data` is empty or could never fit (over `max_data_size` or `initial_window`).
        A memoryview is queued as it is, not copied: its bytes must not change until sent.
        Then call `data_to_send()`.
        """
        return self._send_in_window(channel, data, data_head)

    def cast(self, data: bytes, *, group: int = 0) -> None:
        """Queue a cast of our broadcast (a host, the dialer, to its relay); it costs no window:
        the relay copies it to the channels we joined to `group` (0..MAX_CAST_GROUPS-1). A group
        other than 0 only to a relay that advertised `cast-groups` (docs/protocol.md, "Broadcast
        groups"): an older one would close the link with 4000. Then call `data_to_send()`."""
        self._check_ready()
        check_group(group)
        if self._side is not Side.DIALER:
            raise LocalProtocolError("only the dialer (a host) casts without a channel")
        if not isinstance(data, bytes) or not data:
            raise LocalProtocolError("a cast carries bytes, never empty")
        max_data = self._limits.max_data_size
        if max_data is not None and len(data) > max_data:
            raise LocalProtocolError(
                "cast is larger than max_data_size", code=CloseCode.LIMIT_REACHED
            )
        self._queue(Cast(channel=None, data=data, group=group))

    def join(self, channel: int, *, group: int = 0) -> None:
        """Queue a `join` (a host to its relay): casts of `group` from the next one on go to
        `channel` too, and no other group's (a channel is in one group at most). Raises
        ChannelNotOpenError if the channel is closing or gone."""
        self._signal(Join(channel=channel, group=check_group(group)), Side.DIALER)

    def part(self, channel: int) -> None:
        """Queue a `part` (a host to its relay): no more casts to `channel`, whatever its group."""
        self._signal(Part(channel=channel), Side.DIALER)

    def cut(self, channel: int) -> None:
        """Queue a `cut` (the relay to a teammate): no more casts on `channel` for now."""
        self._signal(Cut(channel=channel), Side.ACCEPTER)

    def _signal(self, frame: Join | Part | Cut, side: Side) -> None:
        self._check_ready()
        if self._side is not side:
            raise LocalProtocolError("a broadcast frame in the wrong direction")
        found = self._channels.get(frame.channel)
        transition(found.state if found is not None else None, Input.SEND_DATA)
        self._queue(frame)

    def send_cast(self, channel: int, data: bytes | bytearray | memoryview) -> bool:
        """Queue a cast (the relay to a teammate) on `channel` if it fits the send window, as
        `send_data` does, with the same errors; False when the window is too small now."""
        if self._side is not Side.ACCEPTER:
            raise LocalProtocolError("only the accepter (the relay) casts to a channel")
        return self._send_in_window(channel, data, cast_head)

    def _send_in_window(
        self,
        channel: int,
        data: bytes | bytearray | memoryview,
        head: Callable[[int, int], bytes],
    ) -> bool:
        """Queue the frame `head` starts, followed by `data`, on `channel` if `data` fits its
        send window (`data` and `cast` frames both cost their `d`); the checks of `send_data`."""
        if not self._ready:
            self._check_ready()
        if type(data) is not bytes:
            if isinstance(data, memoryview) and data.contiguous and data.format in ("B", "c"):
                data = data.cast("B") if data.ndim != 1 else data
            elif isinstance(data, bytes | bytearray | memoryview):
                data = bytes(data)  # the caller's to change once we return
            else:
                raise LocalProtocolError("data must be bytes")
        size = len(data)
        if size == 0:
            raise LocalProtocolError("data must not be empty")
        max_data = self._limits.max_data_size
        if size > self._limits.initial_window or (max_data is not None and size > max_data):
            raise LocalProtocolError(
                "data is larger than max_data_size or initial_window", code=CloseCode.LIMIT_REACHED
            )
        if type(channel) is not int:
            raise LocalProtocolError("a channel id must be an int in 0..2**32-1")
        found = self._channels.get(channel)
        transition(found.state if found is not None else None, Input.SEND_DATA)
        assert found is not None
        if size > found.send_window:
            return False
        first = head(channel, size)
        limit = self._limits.max_message_size
        # Checked before the window is taken: a frame that cannot be sent costs nothing.
        if limit is not None and len(first) + size > limit:
            raise LocalProtocolError(
                "frame is larger than max_message_size", code=CloseCode.LIMIT_REACHED
            )
        self._outgoing.append((first, data))
        found.send_window -= size
        return True

    def acknowledge(self, channel: int, n: int) -> None:
        """Tell the protocol the application consumed `n` more received bytes of `channel`.

        Queues a `window` frame granting the consumed bytes back once half the initial window has
        been consumed since the last grant, or once everything received has been consumed while
        the peer's window is smaller than the largest message it may send (without this a peer
        waiting to send one large message would wait forever). Then call `data_to_send()`.
        Does nothing if the channel is closing or gone, since the peer will send nothing more.
        """
        if not self._ready:
            self._check_ready()
        if type(n) is not int or n < 0:
            raise LocalProtocolError("acknowledge needs an int >= 0")
        found = self._channels.get(channel)
        outcome = transition(found.state if found is not None else None, Input.ACKNOWLEDGE)
        if outcome.action is not Action.PROCEED:
            return
        assert found is not None
        if n > found.unacked:
            raise LocalProtocolError("acknowledged more bytes than were received")
        found.unacked -= n
        found.consumed += n
        if not found.consumed:
            return
        idle = found.unacked == 0 and found.recv_window < self._largest_message
        if found.consumed >= self._half_window or idle:
            self._queue(Window(channel=channel, n=found.consumed))
            found.recv_window += found.consumed
            found.consumed = 0

    def close_channel(self, channel: int, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Queue a `close`; the channel is CLOSE_SENT until the peer's close arrives.

        Does nothing if the channel is already closing or gone: the peer's close can always
        cross ours. Then call `data_to_send()`.
        """
        self._check_ready()
        if type(code) is not int and not isinstance(code, CloseCode):
            raise LocalProtocolError("a close code must be an int")
        if not MIN_CLOSE_CODE <= code <= MAX_CLOSE_CODE:
            raise LocalProtocolError("a close code must be in 1000..4999")
        check_str(reason, "reason", self._limits, remote=False)
        found = self._channels.get(channel)
        outcome = transition(found.state if found is not None else None, Input.SEND_CLOSE)
        if outcome.action is not Action.PROCEED:
            return
        assert found is not None
        assert outcome.next is not None
        self._queue(Close(channel=channel, code=int(code), reason=reason))
        found.state = outcome.next

    # --- helpers --------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise LocalProtocolError("the link has failed", code=self._failure.code)

    def _check_ready(self) -> None:
        self._check_usable()
        if not self._hello_sent:
            raise LocalProtocolError("send_hello() must come first")
        if not self._hello_received:
            raise LocalProtocolError("channels can be used only after the peer's hello")

    def _queue(self, frame: Frame, *, checked: bool = False) -> None:
        """Queue `frame`; `checked`: its strings and maps were checked against our limits."""
        message = encode_frame(frame, checked=checked)
        limit = self._limits.max_message_size
        if limit is not None and len(message) > limit:
            raise LocalProtocolError(
                "frame is larger than max_message_size", code=CloseCode.LIMIT_REACHED
            )
        self._outgoing.append(message)

    def _allocate(self) -> int:
        channel = self._next_id
        # Ids are reused only after wrapping around 2**31 opens, and never one still in use;
        # the loop ends because fewer than 2**31 channels can be in use.
        while channel in self._channels:
            channel = self._step(channel)
        self._next_id = self._step(channel)
        return channel

    def _step(self, channel: int) -> int:
        channel += 2
        return self._first_id if channel > MAX_CHANNEL_ID else channel

    def _forget(self, channel: int) -> None:
        found = self._channels.pop(channel)
        if found.ours:
            self._ours -= 1
        else:
            self._theirs -= 1
