"""A browser's side of Web Push, for the tests: a subscription's key pair and the decryption of
a push body (RFC 8291 section 3.4, RFC 8188 section 2), written from the RFCs with
`cryptography` alone, so the host's encryption is checked against an independent reader; and
the VAPID JWT check a push service makes (RFC 8292 section 2)."""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


def b64d(text: str) -> bytes:
    text = "".join(text.split())
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _hkdf(salt: bytes, ikm: bytes, info: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(ikm)


@dataclass
class BrowserKeys:
    """What `PushManager.subscribe` makes: a P-256 key pair and a 16-byte auth secret."""

    private: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    auth: bytes = field(default_factory=lambda: os.urandom(16))

    @property
    def public(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )

    def decrypt(self, body: bytes) -> bytes:
        """The plaintext of a push body, or ValueError / InvalidTag."""
        salt, rs, idlen = body[:16], int.from_bytes(body[16:20], "big"), body[20]
        sender = body[21 : 21 + idlen]
        record = body[21 + idlen :]
        if len(record) > rs:
            raise ValueError("more than one record")
        shared = self.private.exchange(
            ec.ECDH(), ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), sender)
        )
        ikm = _hkdf(self.auth, shared, b"WebPush: info\x00" + self.public + sender, 32)
        cek = _hkdf(salt, ikm, b"Content-Encoding: aes128gcm\x00", 16)
        nonce = _hkdf(salt, ikm, b"Content-Encoding: nonce\x00", 12)
        padded = AESGCM(cek).decrypt(nonce, record, None)
        end = padded.rstrip(b"\x00")
        if not end.endswith(b"\x02"):
            raise ValueError("not the last record's delimiter")
        return end[:-1]


def verify_vapid(authorization: str, *, audience: str, now: float) -> dict[str, Any]:
    """The claims of a `vapid t=JWT,k=KEY` header if its ES256 signature is by KEY, its `aud`
    is `audience` and it has not expired nor expires in more than 24 hours; AssertionError or
    InvalidSignature otherwise. Returns the claims and the key as `k`."""
    scheme, _, params = authorization.partition(" ")
    assert scheme == "vapid", authorization
    fields = dict(part.strip().split("=", 1) for part in params.split(","))
    token, key = fields["t"], b64d(fields["k"])
    header_b64, claims_b64, signature_b64 = token.split(".")
    header = json.loads(b64d(header_b64))
    assert header["alg"] == "ES256"
    signature = b64d(signature_b64)
    assert len(signature) == 64
    public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), key)
    public.verify(
        encode_dss_signature(
            int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
        ),
        f"{header_b64}.{claims_b64}".encode(),
        ec.ECDSA(hashes.SHA256()),
    )
    claims: dict[str, Any] = json.loads(b64d(claims_b64))
    assert claims["aud"] == audience, claims
    assert now < claims["exp"] <= now + 24 * 3600, claims
    assert claims["sub"].startswith(("mailto:", "https:")), claims
    return {**claims, "k": key}
