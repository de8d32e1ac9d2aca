"""The teammate's CPU per member of the host's presence messages, in process: what every joiner
pays for each member listed (at most LISTED_MEMBERS, 50, since presence counts the rest). No
sockets.

Run: .venv/bin/python bench/presence_bench.py [--members 50] [--per-delta 10] [--rounds 30]

Two paths, each as a teammate takes it:
- the joiner's list: the `broadcast` message, as it came on the channel (decoded, then fed to a
  `Follower` that just ended its snapshot), holding MEMBERS members;
- the deltas after it: casts of the host's broadcast (sealed and signed as the host seals them),
  each one presence delta of PER_DELTA members joined, until MEMBERS joined in all; with and
  without the cast's signature check (per cast, not per member), so a change to the per-member
  work shows on its own.
Prints, per path, the median and [min-max] over the rounds of the process CPU time
(`time.process_time`, so other work on the machine does not count) per member.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from harness import print_timed

from tunnel.app import follower_vectors as vectors
from tunnel.app.follower import Follower, Presence
from tunnel.app.host_messages import decode_host_message, pack
from tunnel.host.presence import LISTED_MEMBERS


def member(member_id: int) -> dict[str, Any]:
    """A member as the host sends it: a role link's holder, named as the benches name them."""
    return {"name": f"t{member_id}", "role": "drive", "id": member_id}


def follower() -> Follower:
    """A follower whose snapshot just ended: the next message is its `broadcast`."""
    following = Follower(host_id=vectors.HOST.host_id)
    following.subscribe(-1)
    following.receive_message(vectors.snapshot([], last_seq=-1))
    return following


def time_list(plaintext: bytes, members: int) -> float:
    following = follower()
    start = time.process_time()
    events = following.receive_message(decode_host_message(plaintext))
    spent = time.process_time() - start
    assert isinstance(events[-1], Presence)
    assert len(events[-1].members) == members
    return spent / members


class _Unsigned:
    """Stands in for the cast opener without its signature check (one per cast, 0.1 ms or so):
    the per-member work alone."""

    def __init__(self, plaintexts: dict[bytes, bytes]) -> None:
        self._plaintexts = plaintexts

    def open(self, cast: bytes) -> bytes:
        return self._plaintexts[cast]


def following_one() -> Follower:
    """A follower of the broadcast, whose list holds one member (id 0)."""
    joined = follower()
    joined.receive_message(vectors.broadcast(members=[member(0)]))
    return joined


def time_deltas(casts: list[bytes], members: int, opened: dict[bytes, bytes] | None) -> float:
    following = following_one()
    if opened is not None:
        following._opener = _Unsigned(opened)  # type: ignore[assignment]
    start = time.process_time()
    for cast in casts:
        following.receive_cast(cast)
    spent = time.process_time() - start
    assert len(following.roster.members) == members + 1, len(following.roster.members)
    return spent / members


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=LISTED_MEMBERS)
    parser.add_argument("--per-delta", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    n = args.members
    listed = pack(vectors.broadcast(members=[member(i) for i in range(n)]))
    caster = vectors.Caster()
    deltas = [
        caster.cast(
            {
                "op": "presence",
                "joined": [member(i) for i in range(first, min(first + args.per_delta, n + 1))],
                "left": [],
                "count": min(first + args.per_delta, n + 1),
            }
        )
        for first in range(1, n + 1, args.per_delta)
    ]
    opener = following_one()._opener
    assert opener is not None
    opened = {cast: opener.open(cast) for cast in deltas}
    rows: list[tuple[str, Callable[[], float]]] = [
        ("the joiner's list", lambda: time_list(listed, n)),
        ("deltas in casts", lambda: time_deltas(deltas, n, opened)),
        ("  with the signature check", lambda: time_deltas(deltas, n, None)),
    ]
    print(
        f"{n} members, {args.per_delta} per delta, {args.rounds} rounds:"
        " CPU us/member, median [min-max]"
    )
    print_timed(rows, args.rounds, 3)


if __name__ == "__main__":
    main()
