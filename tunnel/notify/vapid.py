"""The host's VAPID key (RFC 8292): a P-256 key pair kept beside the host key, whose public half
a teammate's browser subscribes with, and whose JWT every push request carries.

A push service accepts a push for a subscription only with a JWT signed by the key the
subscription was made for (RFC 8292 section 4), so nobody who learns an endpoint can push to it.
"""

from __future__ import annotations

import base64
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid02

from tunnel.e2e.identity import KeyFileError, read_private_file, write_private_file

JWT_LIFETIME = 12 * 3600
"""Seconds a VAPID JWT is valid: RFC 8292 section 2 allows at most 24 hours; half leaves room
for a host's clock running ahead of the push service's."""


def b64url(data: bytes) -> str:
    """base64url without padding, as Web Push writes keys (RFC 8291 section 3.2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """The bytes of base64url text with or without padding; ValueError for anything else."""
    if not text or any(c not in _B64URL for c in text.rstrip("=")):
        raise ValueError("not base64url")
    stripped = text.rstrip("=")
    return base64.urlsafe_b64decode(stripped + "=" * (-len(stripped) % 4))


_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def origin_of(url: str) -> str:
    """`scheme://host[:port]` of `url`, lower-cased, the port only if not the scheme's default
    (RFC 6454 section 6.2): a JWT's audience (RFC 8292 section 2)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    default = _DEFAULT_PORTS.get(scheme)
    port = f":{parts.port}" if parts.port is not None and parts.port != default else ""
    return f"{scheme}://{host}{port}"


_DEFAULT_PORTS = {"http": 80, "https": 443}


class VapidKey:
    """The host's VAPID key pair; the private key stays in this object and its 0600 file."""

    __slots__ = ("_private", "public_key")

    public_key: bytes
    """The 65-byte uncompressed public point: the browser's `applicationServerKey`."""

    def __init__(self, private_key: ec.EllipticCurvePrivateKey) -> None:
        if not isinstance(private_key.curve, ec.SECP256R1):
            raise ValueError("a VAPID key is a P-256 key")
        self._private = private_key
        self.public_key = private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )

    def __repr__(self) -> str:
        return f"VapidKey(public_key={self.application_server_key!r})"

    @property
    def application_server_key(self) -> str:
        """The public key as base64url without padding: `ready`'s `push_key`."""
        return b64url(self.public_key)

    @classmethod
    def generate(cls) -> VapidKey:
        return cls(ec.generate_private_key(ec.SECP256R1()))

    @classmethod
    def load_or_create(cls, path: Path) -> VapidKey:
        """The key at `path`, created (mode 0600, parent 0700) if missing, as the host key is
        (`tunnel.e2e.identity`). Raises KeyFileError for a file others may read, or one that is
        not a P-256 private key."""
        path = Path(path)
        if not path.exists():
            key = cls.generate()
            if write_private_file(path, key._to_pem(), overwrite=False):
                return key
        data = read_private_file(path)
        try:
            private = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            raise KeyFileError(
                f"{path} is not a valid unencrypted PEM private key; move it away to create a new"
                " push key (teammates then turn notifications on again)"
            ) from None
        if not isinstance(private, ec.EllipticCurvePrivateKey) or not isinstance(
            private.curve, ec.SECP256R1
        ):
            raise KeyFileError(f"{path} holds no P-256 private key")
        return cls(private)

    def authorization(self, endpoint: str, *, contact: str, now: float) -> str:
        """The `Authorization` header of a push to `endpoint`: `vapid t=JWT,k=KEY` (RFC 8292
        section 3), the JWT's audience the endpoint's origin, expiring `JWT_LIFETIME` from
        `now`, its subject `contact`."""
        claims = {"aud": origin_of(endpoint), "exp": int(now) + JWT_LIFETIME, "sub": contact}
        headers = Vapid02(private_key=self._private).sign(claims)
        value: str = headers["Authorization"]
        return value

    def _to_pem(self) -> bytes:
        return self._private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
