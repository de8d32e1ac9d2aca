"""The reference test vectors of tests/vectors/crypto.json, computed from fixed inputs.

Every other implementation (the page's crypto.js) must reproduce these bytes exactly; the inputs
are listed in docs/security.md, "Test vectors". Print them with
`python -m tunnel.e2e.vectors --vectors` (and the docs' table with `--vectors-markdown`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping

import msgpack

from tunnel.e2e import broadcast, opening
from tunnel.e2e.crypto import (
    ChannelCipher,
    ShareLink,
    b64url_encode,
    e2e_root,
    relay_token,
    token_verifier,
)
from tunnel.e2e.identity import HostIdentity


def reference_vectors() -> dict[str, str]:
    """Every vector, by name, as crypto.json holds them."""
    secret = bytes(range(0x00, 0x20))
    seed = bytes(range(0x20, 0x40))
    challenge = bytes(range(0x40, 0x60))
    salt = bytes(range(0x60, 0x70))
    name = "alice"
    relay_url = "https://relay.example"
    role = "drive"
    identity = HostIdentity.from_seed(seed)
    host_id = identity.host_id
    plaintext = msgpack.packb({"op": "prompt", "text": "hello"})
    reply = msgpack.packb({"op": "error", "code": "forbidden", "message": "no"})
    token = relay_token(secret, host_id)
    root = e2e_root(secret, host_id)
    opened = opening.reference_vectors(
        identity=identity, root=root, role=role, name=name, salt=salt
    )
    up = ChannelCipher(bytes.fromhex(opened["k_up_hex"]), host_id)
    down = ChannelCipher(bytes.fromhex(opened["k_down_hex"]), host_id)
    link = ShareLink(relay_url=relay_url, host_id=host_id, role=role, secret=secret)
    return {
        "secret_hex": secret.hex(),
        "secret_b64url": b64url_encode(secret),
        "host_seed_hex": seed.hex(),
        "host_public_key_hex": identity.public_key.hex(),
        "host_id": host_id,
        "relay_url": relay_url,
        "role": role,
        "challenge_hex": challenge.hex(),
        "hello_signature_hex": identity.sign_hello(challenge, relay_url).hex(),
        "salt_hex": salt.hex(),
        "name": name,
        "plaintext_hex": plaintext.hex(),
        "token_b64url": b64url_encode(token),
        "verifier_hex": token_verifier(token).hex(),
        "root_hex": root.hex(),
        **opened,
        "ciphertext_up_0_hex": up.encrypt(plaintext).hex(),
        "ciphertext_up_1_hex": up.encrypt(plaintext).hex(),
        "reply_plaintext_hex": reply.hex(),
        "ciphertext_down_0_hex": down.encrypt(reply).hex(),
        "share_link": str(link),
        **broadcast.reference_vectors(),
    }


def vectors_markdown(vectors: Mapping[str, str]) -> str:
    """Render the vectors as the table docs/security.md embeds."""
    rows = ["| name | value |", "|---|---|"]
    rows += [f"| `{name}` | `{value}` |" for name, value in vectors.items()]
    return "\n".join(rows) + "\n"


def _main(argv: list[str]) -> int:
    if argv == ["--vectors"]:
        sys.stdout.write(json.dumps(reference_vectors(), indent=2) + "\n")
        return 0
    if argv == ["--vectors-markdown"]:
        sys.stdout.write(vectors_markdown(reference_vectors()))
        return 0
    sys.stderr.write("usage: python -m tunnel.e2e.vectors --vectors | --vectors-markdown\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
