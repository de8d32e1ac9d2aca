"""Two Connection objects wired back to back, without sockets."""

from __future__ import annotations

from tunnel.proto import DEFAULT_LIMITS, Connection, Event, Limits, Side


def deliver(source: Connection, target: Connection) -> list[Event]:
    """Move everything `source` queued into `target`; return the events `target` reported."""
    for message in source.data_to_send():
        target.receive_data(message)
    return target.events_received()


def linked(limits: Limits = DEFAULT_LIMITS) -> tuple[Connection, Connection]:
    """Return (dialer, accepter) with both hellos exchanged and no events pending."""
    dialer = Connection(Side.DIALER, limits=limits)
    accepter = Connection(Side.ACCEPTER, limits=limits)
    accepter.send_hello({"role": "relay"})
    dialer.send_hello({"role": "teammate"})
    deliver(accepter, dialer)
    deliver(dialer, accepter)
    return dialer, accepter
