"""The link protocol, sans I/O: frames, channels and flow control (docs/protocol.md).

Imports no network or concurrency library: the relay, the host and the clients drive a
`Connection` with the bytes of each WebSocket message and send what it returns.
"""

from __future__ import annotations

from tunnel.proto.codes import FINAL_CODES, CloseCode, code_name
from tunnel.proto.connection import Connection, Outgoing, Side
from tunnel.proto.errors import (
    ChannelNotOpenError,
    FlowControlError,
    FrameError,
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
    KINDS,
    MAX_CAST_GROUPS,
    MAX_CHANNEL_ID,
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
    decode_frame,
    encode_frame,
)
from tunnel.proto.limits import DEFAULT_LIMITS, MAX_WINDOW, Limits
from tunnel.proto.states import ChannelState

__all__ = [
    "DEFAULT_LIMITS",
    "FINAL_CODES",
    "KINDS",
    "MAX_CAST_GROUPS",
    "MAX_CHANNEL_ID",
    "MAX_WINDOW",
    "Cast",
    "CastCut",
    "CastJoined",
    "CastParted",
    "CastReceived",
    "ChannelClosed",
    "ChannelNotOpenError",
    "ChannelOpened",
    "ChannelState",
    "Close",
    "CloseCode",
    "Connection",
    "Cut",
    "Data",
    "DataReceived",
    "Event",
    "FlowControlError",
    "Frame",
    "FrameError",
    "Hello",
    "HelloReceived",
    "Join",
    "LimitError",
    "Limits",
    "LocalProtocolError",
    "Open",
    "Outgoing",
    "Part",
    "Payload",
    "ProtocolError",
    "RemoteProtocolError",
    "Side",
    "Window",
    "WindowUpdated",
    "code_name",
    "decode_frame",
    "encode_frame",
]
