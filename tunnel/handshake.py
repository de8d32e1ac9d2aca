"""The hello payloads of relay, host and teammate: built and checked here, sans-I/O.

Each end of a link says hello first (docs/protocol.md, "Hello"; docs/relay.md, "Hello and
admission"). The relay speaks first with a challenge and the limits it enforces; a host answers
with its key, its signature over the challenge, the verifiers of its share links and which process
it is (so the relay tells its reconnect from a second host with the same key); a teammate
answers with the host id, its token and its display name. Every check that fails raises
`HelloError` with the close code to send; its message is safe to log and to send as the close
reason (never a token or a key).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tunnel.e2e.crypto import ROLES
from tunnel.e2e.identity import (
    CHALLENGE_SIZE,
    PUBLIC_KEY_SIZE,
    HostIdentity,
    derive_host_id,
    is_host_id,
    verify_host_signature,
)
from tunnel.errors import TunnelError
from tunnel.proto import Limits
from tunnel.proto.codes import CloseCode

__all__ = [
    "ADMISSION_PATH",
    "ADVERTISED_LIMITS",
    "CAST_GROUPS",
    "INSTANCE_SIZE",
    "MAX_CAPABILITIES",
    "MAX_INVITATIONS",
    "MAX_NAME_LENGTH",
    "PROTOCOL_VERSION",
    "REGISTER_PATH",
    "RELAY_CAPABILITIES",
    "VERIFIER_SIZE",
    "HelloError",
    "HostHello",
    "Invited",
    "RelayHello",
    "TeammateHello",
    "advertised",
    "agreed_limits",
    "check_name",
    "host_hello",
    "parse_host_hello",
    "parse_registration",
    "parse_relay_hello",
    "parse_teammate_hello",
    "registration",
    "relay_hello",
    "teammate_hello",
]

PROTOCOL_VERSION = 4
"""Spoken in every hello; bumped on incompatible wire changes."""

MAX_NAME_LENGTH = 64
"""Characters of a teammate's display name (in its hello, its `open` and its channel keys)."""

MAX_CAPABILITIES = 32
"""Entries in a host's or a relay's capability list."""

CAST_GROUPS = "cast-groups"
"""A relay capability: the relay takes a `g` in a host's `cast` and `join` and copies each cast
only to the channels joined to its group (docs/protocol.md, "Broadcast groups"). A relay without
it closes a host link that sends one with 4000, so a host casts to no group but 0 there."""

RELAY_CAPABILITIES: tuple[str, ...] = (CAST_GROUPS,)
"""What this relay's hello says it can do beyond what `PROTOCOL_VERSION` promises."""

VERIFIER_SIZE = 32
"""A verifier is sha256(token)."""

MAX_INVITATIONS = 32
"""Personal links (invitations) one host may register besides its two role links: the relay
keeps one more verifier for each (docs/relay.md, "Limits"). The one place this limit is set:
the relay refuses a registration over it, and the host refuses to invite beyond it."""

INSTANCE_SIZE = 16
"""Bytes of a host's instance: random, made once per host process and sent in each of its hellos."""

ADMISSION_PATH = "admission"
"""The one channel a host opens: right after its hello, to learn that the relay admitted it. The
relay handles a link's frames in order, so it answers this open (a close with 1000) only after it
accepted the hello; a refused hello closes the whole link instead (docs/relay.md)."""

REGISTER_PATH = "register"
"""A channel a registered host opens to replace its verifiers (a person invited or revoked)
without a new connection, so the channels of everyone else stay open. Its meta holds
`verifiers` and `invited` as in the host's hello; the relay answers with a close: 1000 once the
new verifiers are in force (teammates whose token no longer matches are closed with 4008), 4000
if the meta is malformed (docs/relay.md, "Hello and admission")."""

ADVERTISED_LIMITS = (
    "max_message_size",
    "max_data_size",
    "max_string_length",
    "max_channels",
    "initial_window",
)
"""The `Limits` fields the relay states in its hello, so that both ends of a link agree."""


class HelloError(TunnelError):
    """A hello was refused: close the link with `code`; `str(self)` is the (safe) reason."""

    def __init__(self, code: CloseCode, reason: str, *, metric: str = "bad_hello") -> None:
        # Always the peer's doing: it sent the hello that failed the check.
        super().__init__(reason, code=code, reason=reason, by_peer=True)
        self.metric = metric
        """Label for the relay's rejection counter (a fixed word, never peer data)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RelayHello:
    """A relay hello that a host or teammate accepted."""

    challenge: bytes
    """What a host signs, with the relay's URL, to prove its key."""

    limits: Mapping[str, int]
    """The advertised limits (a subset of ADVERTISED_LIMITS, each a positive int)."""

    capabilities: frozenset[str] = frozenset()
    """What the relay can do beyond the version (`CAST_GROUPS`); unknown names are kept unread."""

    @property
    def cast_groups(self) -> bool:
        """Whether a host may cast to and join broadcast groups other than 0 on this relay."""
        return CAST_GROUPS in self.capabilities


@dataclass(frozen=True, slots=True, kw_only=True)
class Invited:
    """One personal link's verifier as a host registers it: the relay learns its role and its
    verifier, never the person's name."""

    role: str
    """"view" or "drive": what a token matching this verifier may do."""

    verifier: bytes = field(repr=False)
    """sha256 of the personal link's relay token."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HostHello:
    """A host hello that passed every check."""

    public_key: bytes
    """The host's raw Ed25519 public key."""

    host_id: str
    """Derived from the public key: nobody else can claim it."""

    capabilities: tuple[str, ...]
    """What the host says it supports (opaque to the relay)."""

    verifiers: Mapping[str, bytes] = field(repr=False)
    """{"view": sha256(view token), "drive": sha256(drive token)}."""

    invited: tuple[Invited, ...] = ()
    """The verifiers of the host's personal links (at most MAX_INVITATIONS)."""

    instance: bytes | None
    """Which host process this is: the same in all its reconnects. None if the hello had none
    (then this connection is a process of its own)."""

    replace: bool
    """The host asked to take over its host id from another process online with the same key."""

    limits: Mapping[str, int] = field(default_factory=dict)
    """The host's own limits (a subset of ADVERTISED_LIMITS); the relay keeps within them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TeammateHello:
    """A teammate hello with the right shape (the token is not checked yet)."""

    host_id: str
    """The host it wants to attach to."""

    token_hash: bytes = field(repr=False)
    """sha256 of the token it presented; the token itself is not kept."""

    name: str
    """Its display name (unverified, shown to the host as a hint only)."""


def check_name(name: str) -> str:
    """Return `name` if it is a usable display name; raise ValueError (the caller's mistake)."""
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise ValueError(f"a display name is 1 to {MAX_NAME_LENGTH} characters")
    return name


# -- the relay's hello ------------------------------------------------------------------------


def relay_hello(challenge: bytes, limits: Limits) -> dict[str, Any]:
    """Return the relay's hello payload: role, version, challenge, the limits it enforces and
    its capabilities."""
    return {
        "role": "relay",
        "version": PROTOCOL_VERSION,
        "challenge": challenge,
        "limits": advertised(limits),
        "capabilities": list(RELAY_CAPABILITIES),
    }


def parse_relay_hello(payload: Mapping[str, Any]) -> RelayHello:
    """Check the relay's hello as a host or teammate receives it."""
    _common(payload, "relay")
    challenge = payload.get("challenge")
    if not isinstance(challenge, bytes) or len(challenge) != CHALLENGE_SIZE:
        raise HelloError(CloseCode.PROTOCOL_ERROR, "the relay's challenge is malformed")
    # Left out by a relay from before capabilities: it has none of them.
    capabilities = _capabilities(payload, "the relay's")
    return RelayHello(
        challenge=challenge,
        limits=_limits_field(payload, "the relay's"),
        capabilities=frozenset(capabilities),
    )


def agreed_limits(ours: Limits, relay: RelayHello) -> Limits:
    """The limits a host or teammate uses once the relay said which it enforces.

    Both ends of a link must start channels with the same window (docs/protocol.md, "Limits"),
    so the relay's `initial_window` wins; a `data` frame must fit what both accept.
    """
    window = relay.limits.get("initial_window", ours.initial_window)
    theirs = relay.limits.get("max_data_size")
    max_data = ours.max_data_size if theirs is None else min(theirs, ours.max_data_size or theirs)
    return replace(ours, initial_window=window, max_data_size=max_data)


# -- the host's hello -------------------------------------------------------------------------


def host_hello(
    identity: HostIdentity,
    relay: RelayHello,
    *,
    relay_url: str,
    capabilities: tuple[str, ...],
    verifiers: Mapping[str, bytes],
    instance: bytes,
    replace: bool = False,
    limits: Limits | None = None,
    invited: Sequence[Invited] = (),
) -> dict[str, Any]:
    """Return the host's hello: its key, its signature over the challenge, its verifiers.

    `instance` (INSTANCE_SIZE random bytes, the same for every reconnect of one host process) lets
    the relay replace this process's stale connection but refuse another process with the same
    key (4009); `replace` asks it to take the host id over from such a process instead.
    `limits` are the host's own: the relay opens no more channels toward it than its
    `max_channels`, so an open over the limit is refused for that channel only. `invited` are
    the verifiers of the host's personal links, sent only when there are any.
    """
    if len(instance) != INSTANCE_SIZE:
        raise ValueError(f"an instance is {INSTANCE_SIZE} bytes")
    return {
        "role": "host",
        "version": PROTOCOL_VERSION,
        "pubkey": identity.public_key,
        "sig": identity.sign_hello(relay.challenge, relay_url),
        "capabilities": list(capabilities),
        **registration(verifiers, invited),
        "instance": instance,
        "replace": replace,
        **({} if limits is None else {"limits": advertised(limits)}),
    }


def parse_host_hello(
    payload: Mapping[str, Any],
    *,
    challenge: bytes,
    public_url: str,
    authorized_keys: frozenset[bytes] | None,
) -> HostHello:
    """Check a host hello: shape, signature over (challenge || public_url), authorized keys.

    `instance` and `replace` may be left out: no instance, and no replacing.
    """
    _common(payload, "host")
    expected = {
        "role",
        "version",
        "pubkey",
        "sig",
        "capabilities",
        "verifiers",
        "invited",
        "instance",
        "replace",
        "limits",
    }
    if not set(payload) <= expected:
        raise HelloError(CloseCode.PROTOCOL_ERROR, "unknown host hello field")
    assert len(challenge) == CHALLENGE_SIZE
    public_key = _bytes_field(payload, "pubkey", PUBLIC_KEY_SIZE)
    signature = _bytes_field(payload, "sig", None)
    capabilities = _capabilities(payload, "the host's")
    verifiers, invited = parse_registration(payload)
    instance = _bytes_field(payload, "instance", INSTANCE_SIZE) if "instance" in payload else None
    replace = payload.get("replace", False)
    if type(replace) is not bool:
        raise HelloError(CloseCode.PROTOCOL_ERROR, "hello field 'replace' is malformed")
    limits = _limits_field(payload, "the host's")
    if not verify_host_signature(public_key, challenge, public_url, signature):
        raise HelloError(CloseCode.UNAUTHORIZED, "bad host signature", metric="bad_signature")
    if authorized_keys is not None and public_key not in authorized_keys:
        raise HelloError(
            CloseCode.UNAUTHORIZED, "host key not authorized", metric="unauthorized_host"
        )
    return HostHello(
        public_key=public_key,
        host_id=derive_host_id(public_key),
        capabilities=tuple(capabilities),
        verifiers=verifiers,
        invited=invited,
        instance=instance,
        replace=replace,
        limits=limits,
    )


def registration(verifiers: Mapping[str, bytes], invited: Sequence[Invited] = ()) -> dict[str, Any]:
    """The verifiers a host registers, as its hello and a `REGISTER_PATH` open's meta hold them:
    `invited` only when there are personal links."""
    wire: dict[str, Any] = {"verifiers": dict(verifiers)}
    if invited:
        wire["invited"] = [{"role": i.role, "verifier": i.verifier} for i in invited]
    return wire


def parse_registration(
    payload: Mapping[str, Any],
) -> tuple[dict[str, bytes], tuple[Invited, ...]]:
    """Check the verifiers of a host hello or a `REGISTER_PATH` open: one per role, at most
    MAX_INVITATIONS personal ones, all distinct. Raise HelloError (4000, or 4006 over the
    limit)."""
    raw_verifiers = payload.get("verifiers")
    if not isinstance(raw_verifiers, dict) or set(raw_verifiers) != set(ROLES):
        raise HelloError(CloseCode.PROTOCOL_ERROR, "malformed verifiers")
    verifiers = {role: _bytes_field(raw_verifiers, role, VERIFIER_SIZE) for role in ROLES}
    if verifiers["view"] == verifiers["drive"]:
        raise HelloError(CloseCode.PROTOCOL_ERROR, "view and drive verifiers are equal")
    raw_invited = payload.get("invited", [])
    if not isinstance(raw_invited, list):
        raise HelloError(CloseCode.PROTOCOL_ERROR, "malformed invited verifiers")
    if len(raw_invited) > MAX_INVITATIONS:
        raise HelloError(
            CloseCode.LIMIT_REACHED,
            f"more than {MAX_INVITATIONS} personal links",
            metric="max_invitations",
        )
    invited: list[Invited] = []
    for entry in raw_invited:
        if not isinstance(entry, dict) or set(entry) != {"role", "verifier"}:
            raise HelloError(CloseCode.PROTOCOL_ERROR, "malformed invited verifiers")
        role = entry["role"]
        if role not in ROLES:
            raise HelloError(CloseCode.PROTOCOL_ERROR, "malformed invited verifiers")
        invited.append(Invited(role=role, verifier=_bytes_field(entry, "verifier", VERIFIER_SIZE)))
    every = [*verifiers.values(), *(i.verifier for i in invited)]
    if len(set(every)) != len(every):
        raise HelloError(CloseCode.PROTOCOL_ERROR, "two verifiers are equal")
    return verifiers, tuple(invited)


# -- a teammate's hello -----------------------------------------------------------------------


def teammate_hello(*, host_id: str, token: bytes, name: str) -> dict[str, Any]:
    """Return a teammate's hello: which host, the link's token, and its display name."""
    return {
        "role": "teammate",
        "version": PROTOCOL_VERSION,
        "host_id": host_id,
        "token": token,
        "name": name,
    }


def parse_teammate_hello(payload: Mapping[str, Any]) -> TeammateHello:
    """Check a teammate hello's shape; its token is matched later against the host's verifiers."""
    _common(payload, "teammate")
    if not set(payload) <= {"role", "version", "host_id", "token", "name"}:
        raise HelloError(CloseCode.PROTOCOL_ERROR, "unknown teammate hello field")
    host_id = payload.get("host_id")
    if not isinstance(host_id, str) or not is_host_id(host_id):
        raise HelloError(CloseCode.PROTOCOL_ERROR, "malformed host id")
    token = _bytes_field(payload, "token", None)
    name = payload.get("name")
    # The same rule as the open's name (check_name): one rule for a display name everywhere.
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise HelloError(CloseCode.PROTOCOL_ERROR, "malformed name")
    return TeammateHello(host_id=host_id, token_hash=hashlib.sha256(token).digest(), name=name)


# -- shared checks ----------------------------------------------------------------------------


def _common(payload: Mapping[str, Any], role: str) -> None:
    if payload.get("role") != role:
        raise HelloError(CloseCode.PROTOCOL_ERROR, f"expected a {role} hello")
    version = payload.get("version")
    if type(version) is not int or version != PROTOCOL_VERSION:
        raise HelloError(
            CloseCode.PROTOCOL_ERROR, "unsupported protocol version", metric="bad_version"
        )


def _capabilities(payload: Mapping[str, Any], whose: str) -> list[str]:
    capabilities = payload.get("capabilities", [])
    if (
        not isinstance(capabilities, list)
        or len(capabilities) > MAX_CAPABILITIES
        or not all(isinstance(c, str) for c in capabilities)
    ):
        raise HelloError(CloseCode.PROTOCOL_ERROR, f"{whose} capabilities are malformed")
    return capabilities


def advertised(limits: Limits) -> dict[str, int]:
    """The ADVERTISED_LIMITS of `limits` as a hello states them; a limit that is off is left out."""
    values = {key: getattr(limits, key) for key in ADVERTISED_LIMITS}
    return {key: value for key, value in values.items() if value is not None}


def _limits_field(payload: Mapping[str, Any], whose: str) -> dict[str, int]:
    raw = payload.get("limits", {})
    if not isinstance(raw, Mapping):
        raise HelloError(CloseCode.PROTOCOL_ERROR, f"{whose} limits are malformed")
    limits: dict[str, int] = {}
    for key in ADVERTISED_LIMITS:
        value = raw.get(key)
        if value is None:
            continue
        if type(value) is not int or value < 1:
            raise HelloError(CloseCode.PROTOCOL_ERROR, f"{whose} limits are malformed")
        limits[key] = value
    return limits


def _bytes_field(payload: Mapping[str, Any], key: str, size: int | None) -> bytes:
    value = payload.get(key)
    if not isinstance(value, bytes) or (size is not None and len(value) != size):
        raise HelloError(CloseCode.PROTOCOL_ERROR, f"hello field {key!r} is malformed")
    return value
