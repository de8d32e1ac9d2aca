"""Host identity: the Ed25519 key a host proves itself with, its host id, and key files on disk.

The host id is derived from the public key, so nobody without the private key can claim it
(docs/security.md, "Host identity"). This module also owns the private-file helpers used for every
secret the host keeps on disk (mode 0600, written atomically) and the relay's authorized-keys file.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import re
import secrets
import stat
from pathlib import Path

import platformdirs
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

PUBLIC_KEY_SIZE = 32
"""Raw Ed25519 public keys are 32 bytes."""

SEED_SIZE = 32
"""Raw Ed25519 private keys (seeds) are 32 bytes."""

CHALLENGE_SIZE = 32
"""The relay's hello challenge is 32 random bytes; fixed size keeps challenge || URL unambiguous."""

HOST_ID_LENGTH = 26
"""Characters of base32 kept from sha256(public key): 130 bits."""

HOST_ID_PATTERN = rf"[a-z2-7]{{{HOST_ID_LENGTH}}}"
"""What a host id looks like: lowercase base32, HOST_ID_LENGTH characters (the page uses it too)."""

_HOST_ID_RE = re.compile(HOST_ID_PATTERN)
_AUTHORIZED_KEY_RE = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")

# POSIX permission bits mean nothing on Windows; there the user profile ACLs protect the files.
_CHECK_MODES = os.name != "nt"


class KeyFileError(Exception):
    """A key or secrets file is unusable: wrong permissions, corrupt, or not ours.

    This is a local error (the user's file); the message names the file and says how to fix it.
    """


def derive_host_id(public_key: bytes) -> str:
    """Return the host id of a raw Ed25519 public key: lowercase base32 of its SHA-256, 26 chars."""
    if len(public_key) != PUBLIC_KEY_SIZE:
        raise ValueError(f"an Ed25519 public key is {PUBLIC_KEY_SIZE} bytes, got {len(public_key)}")
    digest = hashlib.sha256(public_key).digest()
    return base64.b32encode(digest).decode("ascii").lower()[:HOST_ID_LENGTH]


def is_host_id(value: str) -> bool:
    """Tell whether `value` has the shape of a host id (26 chars of lowercase base32)."""
    return _HOST_ID_RE.fullmatch(value) is not None


def hello_signature_message(challenge: bytes, relay_url: str) -> bytes:
    """Return what the host signs in its hello: the relay's challenge, then the relay URL (UTF-8).

    Binding the URL means a signature made for one relay cannot be replayed to another.
    """
    if len(challenge) != CHALLENGE_SIZE:
        raise ValueError(f"the hello challenge is {CHALLENGE_SIZE} bytes, got {len(challenge)}")
    return challenge + relay_url.encode("utf-8")


def verify_host_signature(public_key: bytes, challenge: bytes, relay_url: str, sig: bytes) -> bool:
    """Tell whether `sig` is the host's signature over (challenge || relay_url). Never raises."""
    try:
        key = Ed25519PublicKey.from_public_bytes(public_key)
        key.verify(sig, hello_signature_message(challenge, relay_url))
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def default_key_path() -> Path:
    """Return where the host key lives by default: the user's config dir for agent-tunnel."""
    return platformdirs.user_config_path("agent-tunnel") / "host_key"


class HostIdentity:
    """A host's Ed25519 key pair. The private key never leaves this object (or its 0600 file)."""

    __slots__ = ("_private", "host_id", "public_key")

    public_key: bytes
    """The raw 32-byte public key, sent in the host hello."""

    host_id: str
    """`derive_host_id(public_key)`: the stable name teammates' links point to."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._private = private_key
        self.public_key = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.host_id = derive_host_id(self.public_key)

    def __repr__(self) -> str:
        return f"HostIdentity(host_id={self.host_id!r})"

    @classmethod
    def generate(cls) -> HostIdentity:
        """Return a fresh random identity (not saved anywhere)."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> HostIdentity:
        """Return the identity of a raw 32-byte Ed25519 seed (for test vectors and imports)."""
        if len(seed) != SEED_SIZE:
            raise ValueError(f"an Ed25519 seed is {SEED_SIZE} bytes, got {len(seed)}")
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def load_or_create(cls, path: Path) -> HostIdentity:
        """Load the key at `path`, or create it (mode 0600, parent dir 0700) if there is none.

        Raises KeyFileError if the file is readable by group or others, or is not an Ed25519
        private key. Creation is atomic: a crash never leaves a partial key file, and when two
        processes race, both end up with the key that was published first.
        """
        path = Path(path)
        if not path.exists():
            identity = cls.generate()
            if write_private_file(path, identity._to_pem(), overwrite=False):
                return identity
            # Someone else created the key between our check and our write: use theirs.
        return cls._from_pem(path, read_private_file(path))

    def sign(self, message: bytes) -> bytes:
        """Return the 64-byte Ed25519 signature of `message`."""
        return self._private.sign(message)

    def sign_hello(self, challenge: bytes, relay_url: str) -> bytes:
        """Return the hello signature: `sign(hello_signature_message(challenge, relay_url))`."""
        return self.sign(hello_signature_message(challenge, relay_url))

    def _to_pem(self) -> bytes:
        return self._private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @classmethod
    def _from_pem(cls, path: Path, data: bytes) -> HostIdentity:
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            raise KeyFileError(
                f"{path} is not a valid unencrypted PEM private key; move it away to create a new "
                "host key (teammates' links will change)"
            ) from None
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyFileError(f"{path} holds a {type(key).__name__}, not an Ed25519 private key")
        return cls(key)


def read_private_file(path: Path) -> bytes:
    """Read a secret file, refusing it (KeyFileError) if group or others may read or write it."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise KeyFileError(f"cannot open {path}: {exc.strerror}") from None
    try:
        # Checked on the open descriptor, so the file cannot be swapped between check and read.
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"{path} is not a regular file")
        if _CHECK_MODES and info.st_mode & 0o077:
            raise KeyFileError(
                f"{path} is accessible by group or others (mode {stat.S_IMODE(info.st_mode):04o}); "
                f"a secret must be private: run `chmod 600 {path}` if nobody else could have "
                "read it, otherwise delete it and rotate"
            )
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read()
    finally:
        os.close(fd)


def write_private_file(path: Path, data: bytes, *, overwrite: bool) -> bool:
    """Write `data` to `path` with mode 0600, atomically (temp file, fsync, then publish).

    Creates a missing parent directory with mode 0700. With `overwrite=False` an existing file is
    left alone and False is returned; otherwise True.
    """
    path = Path(path)
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # mkdir's mode is filtered by the umask; the directory holding keys must be private.
        os.chmod(path.parent, 0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            if _CHECK_MODES:
                # The umask may have narrowed 0600 further (e.g. to 0400); make it exactly 0600.
                os.fchmod(file.fileno(), 0o600)
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        if overwrite:
            os.replace(tmp, path)
            return True
        try:
            # link() publishes atomically and, unlike replace(), never clobbers a racing writer.
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:
            # No hard links on this filesystem: fall back to a plain atomic rename.
            if path.exists():
                return False
            os.replace(tmp, path)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def load_authorized_keys(path: Path) -> frozenset[bytes]:
    """Read the relay's authorized host keys: one base64 (standard or URL-safe) raw public key
    per line, optionally followed by whitespace and a comment; blank and '#' lines are ignored.

    Raises ValueError naming the file and line of anything else.
    """
    path = Path(path)
    keys: set[bytes] = set()
    with path.open(encoding="utf-8") as file:
        for number, raw in enumerate(file, start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            keys.add(_parse_authorized_key(line.split(maxsplit=1)[0], path, number))
    return frozenset(keys)


def _parse_authorized_key(field: str, path: Path, number: int) -> bytes:
    where = f"{path}, line {number}"
    if field.startswith("ssh-"):
        raise ValueError(f"{where}: expected the raw public key in base64, not an OpenSSH key line")
    if _AUTHORIZED_KEY_RE.fullmatch(field) is None:
        raise ValueError(f"{where}: expected a base64 Ed25519 public key")
    text = field.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{where}: not valid base64") from None
    if len(key) != PUBLIC_KEY_SIZE:
        raise ValueError(
            f"{where}: an Ed25519 public key is {PUBLIC_KEY_SIZE} bytes, this decodes to {len(key)}"
        )
    return key
