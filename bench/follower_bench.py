"""The teammate's CPU per live item of the host's broadcast, in process: real casts (sealed and
signed as the host seals them) fed to a `Follower`, and to a `TeammateSession.receive()` whose
channel hands them over from memory, so only the teammate's own work is timed: no sockets.

Run: .venv/bin/python bench/follower_bench.py [--items 200] [--per-cast 40] [--size 1024]
     [--rounds 30]

The casts are those of bench/fanout_bench.py: `message` items of about SIZE bytes of text, as
`Item.to_wire()` gives them, PER_CAST of them in a cast. Prints, per path, the median and
[min-max] over the rounds of the process CPU time (`time.process_time`, so other work on the
machine does not count) per item, with and without the cast's signature check (which is per
cast, not per item), so a change to the per-item path shows on its own.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from types import SimpleNamespace

import anyio
import msgpack
from harness import print_timed

from tunnel.app import follower_vectors as vectors
from tunnel.app.follower import Follower, Item
from tunnel.app.host_messages import pack
from tunnel.e2e.broadcast import CastSealer
from tunnel.e2e.crypto import ShareLink, e2e_root
from tunnel.e2e.opening import TeammateOpening
from tunnel.link import Casted
from tunnel.proto import Limits
from tunnel.teammate.client import TeammateSession


def casts(items: int, per_cast: int, size: int) -> list[bytes]:
    """The host's casts of `items` message items from seq 0, `per_cast` in each."""
    sealer = CastSealer(vectors.HOST, vectors.EPOCH, counter=vectors.COUNTER)
    text = "x" * size
    out = []
    for first in range(0, items, per_cast):
        messages = [
            pack({"op": "item", "item": vectors.item(seq, text)})
            for seq in range(first, min(first + per_cast, items))
        ]
        out.append(sealer.seal(msgpack.packb(messages, use_bin_type=True)))
    return out


def follower() -> Follower:
    """A follower that follows the broadcast of `casts`, holding nothing before seq 0."""
    following = Follower(host_id=vectors.HOST.host_id)
    following.subscribe(-1)
    following.receive_message(vectors.snapshot([], last_seq=-1))
    following.receive_message(vectors.broadcast(key=vectors.EPOCH, counter=vectors.COUNTER))
    return following


class _Unsigned:
    """Stands in for the cast opener without its signature check: the per-item work alone."""

    def __init__(self, plaintexts: dict[bytes, bytes]) -> None:
        self._plaintexts = plaintexts

    def open(self, cast: bytes) -> bytes:
        return self._plaintexts[cast]


def plaintexts(sealed: list[bytes]) -> dict[bytes, bytes]:
    opener = follower()._opener
    assert opener is not None
    return {cast: opener.open(cast) for cast in sealed}


def time_follower(sealed: list[bytes], items: int, opened: dict[bytes, bytes] | None) -> float:
    following = follower()
    if opened is not None:
        following._opener = _Unsigned(opened)  # type: ignore[assignment]
    start = time.process_time()
    got = 0
    for cast in sealed:
        for event in following.receive_cast(cast):
            if isinstance(event, Item):
                got += 1
    spent = time.process_time() - start
    assert got == items, got
    return spent / items


class _MemoryChannel:
    """A sealed channel whose keys are ready and whose casts come from a list."""

    def __init__(self, sealed: list[bytes]) -> None:
        self._casts = iter(sealed)

    async def receive_any(self) -> Casted:
        return Casted(next(self._casts))


def session(sealed: list[bytes]) -> TeammateSession:
    link = ShareLink(
        relay_url="https://relay.example",
        host_id=vectors.HOST.host_id,
        role="view",
        secret=bytes(32),
    )
    opening = TeammateOpening(
        root=e2e_root(link.secret, link.host_id), host_id=link.host_id, role="view", name="ann"
    )
    channel = SimpleNamespace(limits=Limits())  # all the session reads of its channel here
    teammate = TeammateSession(channel, link=link, opening=opening)  # type: ignore[arg-type]
    teammate._sealed = _MemoryChannel(sealed)  # type: ignore[assignment]
    teammate.follower = follower()
    return teammate


def time_session(sealed: list[bytes], items: int, opened: dict[bytes, bytes] | None) -> float:
    teammate = session(sealed)
    if opened is not None:
        teammate.follower._opener = _Unsigned(opened)  # type: ignore[assignment]

    async def run() -> float:
        start = time.process_time()
        got = 0
        while got < items:
            if isinstance(await teammate.receive(), Item):
                got += 1
        return (time.process_time() - start) / items

    return anyio.run(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--per-cast", type=int, default=40)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    sealed = casts(args.items, args.per_cast, args.size)
    opened = plaintexts(sealed)
    rows: list[tuple[str, Callable[[], float]]] = [
        ("Follower.receive_cast", lambda: time_follower(sealed, args.items, opened)),
        ("  with the signature check", lambda: time_follower(sealed, args.items, None)),
        ("TeammateSession.receive", lambda: time_session(sealed, args.items, opened)),
        ("  with the signature check", lambda: time_session(sealed, args.items, None)),
    ]
    print(
        f"{args.items} items of ~{args.size} B, {args.per_cast} per cast,"
        f" {args.rounds} rounds: CPU us/item, median [min-max]"
    )
    print_timed(rows, args.rounds, 2)


if __name__ == "__main__":
    main()
