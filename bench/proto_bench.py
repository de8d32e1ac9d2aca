"""Throughput of the link protocol against plain msgpack, measured in the same run.

Run: .venv/bin/python bench/proto_bench.py
Prints messages per second for a `data` frame through encode, decode and a full
Connection-to-Connection hop, each as a ratio to msgpack.packb/unpackb of the same map.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgpack

from tunnel.proto import Connection, Data, Side, decode_frame, encode_frame


def rate(label: str, work: Callable[[], object], seconds: float = 1.0) -> float:
    count = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(200):
            work()
        count += 200
    per_second = count / seconds
    print(f"{label:<34} {per_second:>12,.0f} msg/s")
    return per_second


def bench(size: int) -> None:
    payload = b"x" * size
    wire = {"c": 1, "k": "data", "p": {"d": payload}}
    packed = msgpack.packb(wire, use_bin_type=True)
    frame = Data(channel=1, data=payload)
    encoded = encode_frame(frame)

    dialer = Connection(Side.DIALER)
    accepter = Connection(Side.ACCEPTER)
    accepter.send_hello({})
    dialer.send_hello({})
    for message in accepter.data_to_send():
        dialer.receive_data(message)
    for message in dialer.data_to_send():
        accepter.receive_data(message)
    dialer.events_received()
    accepter.events_received()
    channel = dialer.open_channel("bench", {})

    def hop() -> None:
        dialer.send_data(channel, payload)
        for message in dialer.data_to_send():
            accepter.receive_data(message)
        for event in accepter.events_received():
            accepter.acknowledge(channel, len(getattr(event, "data", b"")))
        for message in accepter.data_to_send():
            dialer.receive_data(message)
        dialer.events_received()

    print(f"--- data frame, {size} bytes")
    base_pack = rate("baseline msgpack.packb", lambda: msgpack.packb(wire, use_bin_type=True))
    base_unpack = rate("baseline msgpack.unpackb", lambda: msgpack.unpackb(packed))
    enc = rate("encode_frame", lambda: encode_frame(frame))
    dec = rate("decode_frame", lambda: decode_frame(encoded))
    both = rate("Connection hop (send+recv+ack)", hop)
    print(
        f"encode/packb {enc / base_pack:.2f}  decode/unpackb {dec / base_unpack:.2f}  "
        f"hop/(packb+unpackb) {both / (1 / (1 / base_pack + 1 / base_unpack)):.2f}"
    )


def main() -> None:
    for size in (64, 4096, 64 * 1024):
        bench(size)


if __name__ == "__main__":
    main()
