"""Many WebSocket messages in one socket write.

websockets' `send()` writes to the socket once per message, and at tens of thousands of small
messages a second the system calls are what bound a relay's throughput. Its sans-I/O protocol
frames a message without writing it, so a batch is framed message by message and the frames
leave together. websockets is bounded in pyproject.toml to the versions where this holds.
"""

from __future__ import annotations

from collections.abc import Iterable

from websockets.asyncio.connection import Connection as WebSocket


def write_messages(websocket: WebSocket, messages: Iterable[bytes | str]) -> None:
    """Frame `messages` (bytes as binary, str as text) and hand them to the socket at once.

    The connection must be open (checked by the caller, e.g. inside `send_context()`), and
    nothing else may have left frames in its protocol undrained: only these frames go out.
    """
    protocol = websocket.protocol
    for message in messages:
        if isinstance(message, str):
            protocol.send_text(message.encode())
        else:
            protocol.send_binary(message)
    websocket.transport.writelines(protocol.data_to_send())
