"""The channel opening's CPU cost per attach, both ends together: the signed ephemeral exchange
(tunnel.e2e.opening) against the derivation it replaced (channel keys from the role root, the
teammate's salt, a host nonce and the name: two HKDFs at each end), measured in the same run.

Run: .venv/bin/python bench/opening_bench.py [--openings 2000] [--rounds 7]

Each round times `--openings` openings of each kind, interleaved (old, new, old, new...), with
`time.process_time`; prints microseconds per opening as the median and [min-max] over the
rounds, and the median of the per-round ratios new / old. A CPU-time count: it holds on a busy
machine too, though a loaded core still stretches it somewhat.
"""

from __future__ import annotations

import argparse
import statistics
import time

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from tunnel.e2e.crypto import ChannelCipher, ChannelCrypto, e2e_root, new_salt
from tunnel.e2e.identity import HostIdentity
from tunnel.e2e.opening import TeammateOpening, answer_offer

SECRET = bytes(range(32))
RELAY_URL = "https://relay.example"


def _hkdf(key: bytes, salt: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(key)


def old_opening(host_id: str) -> None:
    """The replaced derivation, at the teammate and at the host."""
    salt, host_nonce = new_salt(), new_salt()
    for _end in ("teammate", "host"):
        root = e2e_root(SECRET, host_id)
        k_up = _hkdf(root, salt + host_nonce, b"up\x00alice")
        k_down = _hkdf(root, salt + host_nonce, b"down\x00alice")
        ChannelCrypto(send=ChannelCipher(k_up, host_id), receive=ChannelCipher(k_down, host_id))


def new_opening(identity: HostIdentity) -> None:
    """The signed ephemeral exchange, at the teammate and at the host."""
    teammate = TeammateOpening(
        root=e2e_root(SECRET, identity.host_id),
        host_id=identity.host_id,
        role="drive",
        name="alice",
    )
    answered = answer_offer(
        identity,
        root=e2e_root(SECRET, identity.host_id),
        offer=teammate.offer,
        proof=teammate.proof,
    )
    teammate.finish(answered.answer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openings", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    identity = HostIdentity.generate()
    old_us: list[float] = []
    new_us: list[float] = []
    for _ in range(args.rounds):
        for kind, samples in (("old", old_us), ("new", new_us)):
            start = time.process_time()
            for _ in range(args.openings):
                if kind == "old":
                    old_opening(identity.host_id)
                else:
                    new_opening(identity)
            samples.append((time.process_time() - start) / args.openings * 1e6)
    ratios = [new / old for old, new in zip(old_us, new_us, strict=True)]
    print(f"openings per round: {args.openings}, rounds: {args.rounds}")
    for name, samples in (("old derivation", old_us), ("signed exchange", new_us)):
        print(
            f"{name:16} {statistics.median(samples):8.1f} us per attach"
            f"  [{min(samples):.1f}-{max(samples):.1f}]"
        )
    print(
        f"ratio new/old    {statistics.median(ratios):8.2f}  [{min(ratios):.2f}-{max(ratios):.2f}]"
    )


if __name__ == "__main__":
    main()
