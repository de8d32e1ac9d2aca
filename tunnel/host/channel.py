"""`HostChannel`: one teammate's channel as the host's handler sees it, decrypted and checked.

The `open` says which role the teammate claims, its display name, its salt, its ephemeral key
and its proof that it holds the role's secret; the host checks the proof and answers, first on
the channel and in clear, with its own ephemeral key signed by its host key (`tunnel.e2e.opening`,
docs/security.md "Opening a channel"). So a teammate without the secret of the role it claims is
refused at its open, a relay that rewrites any field breaks the opening, and only the two ends
can read or write the channel.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from tunnel.app.errors import BadRequest
from tunnel.app.requests import Subscribe, decode_request
from tunnel.e2e.channel import SealedChannel
from tunnel.e2e.crypto import ROLES, ChannelCrypto
from tunnel.e2e.identity import HostIdentity
from tunnel.e2e.opening import (
    EarlySubscribe,
    HostAnswer,
    Offer,
    OpeningError,
    answer_offer,
    check_early_subscribe,
    check_offer_fields,
)
from tunnel.errors import TunnelError
from tunnel.handshake import MAX_NAME_LENGTH
from tunnel.link import ChannelClosedError, LinkChannel
from tunnel.proto.codes import CloseCode


class ChannelRefusedError(TunnelError):
    """An `open` the host will not serve; close the channel with `code`."""

    def __init__(self, code: CloseCode, reason: str) -> None:
        # The teammate (or the relay) sent the open that failed the check.
        super().__init__(reason, code=code, reason=reason, by_peer=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenRequest:
    """What an `open` asks for, checked for shape (not yet for keys)."""

    path: str
    role: str
    """The role the teammate claims; its proof shows it holds that role's secret."""
    salt: bytes
    teammate_key: bytes
    """The teammate's ephemeral X25519 key (`kx`)."""
    proof: bytes
    """The teammate's proof of the role secret over its half of the transcript."""
    name: str
    """Display name the teammate chose; in the signed transcript, so the relay cannot alter it."""
    invitation: bytes | None
    """The verifier of the personal link the relay says the token matched (its `peer`), or None.
    A hint only: the proof is checked with that link's root, so a wrong one fails the open."""
    subscribe: EarlySubscribe | None
    """The subscribe the open carries (`sub`), checked as a `subscribe` request is; None when it
    carries none (the teammate subscribes on the channel)."""
    meta: dict[str, Any]


def parse_open(path: str, meta: dict[str, Any], *, paths: frozenset[str]) -> OpenRequest:
    """Check an `open`'s path and meta; raise ChannelRefusedError with the close code if bad."""
    if path not in paths:
        raise ChannelRefusedError(CloseCode.REFUSED, "unknown channel path")
    role = meta.get("role")
    if role not in ROLES:
        raise ChannelRefusedError(CloseCode.REFUSED, "unknown role")
    assert isinstance(role, str)
    try:
        salt, teammate_key, proof = check_offer_fields(meta)
        subscribe = check_early_subscribe(meta)
    except OpeningError as exc:
        raise ChannelRefusedError(CloseCode(exc.code), exc.reason) from None
    peer = meta.get("peer")
    # The relay matched the token to a role: a claim that contradicts it cannot succeed.
    if isinstance(peer, dict) and peer.get("role") not in (None, role):
        raise ChannelRefusedError(CloseCode.UNAUTHORIZED, "role does not match the token")
    if subscribe is not None:
        # The same bounds as a `subscribe` request on the channel (docs/application.md).
        request = {"op": "subscribe", "after": subscribe.after, "tail": subscribe.tail}
        try:
            decode_request(msgpack.packb(request))
        except BadRequest as exc:
            raise ChannelRefusedError(CloseCode.PROTOCOL_ERROR, exc.message) from None
    invitation = peer.get("invitation") if isinstance(peer, dict) else None
    if invitation is not None and not isinstance(invitation, bytes):
        raise ChannelRefusedError(CloseCode.PROTOCOL_ERROR, "malformed peer")
    name = meta.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise ChannelRefusedError(
            CloseCode.PROTOCOL_ERROR, f"name must be 1 to {MAX_NAME_LENGTH} characters"
        )
    return OpenRequest(
        path=path,
        role=role,
        salt=salt,
        teammate_key=teammate_key,
        proof=proof,
        name=name,
        invitation=invitation,
        subscribe=subscribe,
        meta=meta,
    )


class HostChannel(SealedChannel):
    """One teammate channel on the host: plaintext in and out, one message per `data` frame.

    Its first message, before anything else, is the host's signed answer in clear (sent by the
    first `send` or `receive`, or by `start`).
    """

    def __init__(
        self,
        link_channel: LinkChannel,
        request: OpenRequest,
        answered: HostAnswer,
        *,
        on_close: Callable[[HostChannel], None] | None = None,
        person: str | None = None,
    ) -> None:
        async def send_answer() -> ChannelCrypto:
            await link_channel.send(answered.answer)
            return answered.crypto

        super().__init__(link_channel, send_answer)
        self._request = request
        self._on_close = on_close
        self._person = person

    @property
    def role(self) -> str:
        """The role ("view" or "drive"), whose secret the teammate's open proved it holds."""
        return self._request.role

    @property
    def name(self) -> str:
        """Who this is: the invited name for a personal link (whatever name the client sent),
        else the display name the teammate chose (in the transcript the host signs and the keys
        are bound to), which is not an identity: anyone holding a role link picks any name."""
        return self._person if self._person is not None else self._request.name

    @property
    def person(self) -> str | None:
        """The invited person whose personal link opened this channel (its proof was made with
        that link's root), or None for a role link."""
        return self._person

    @property
    def invitation(self) -> bytes | None:
        """The verifier of the personal link that opened this channel (the proof was checked
        with that link's root, so it is that link's), or None for a role link."""
        return self._request.invitation if self._person is not None else None

    @property
    def verified(self) -> bool:
        """Whether `name` is bound by the host (a personal link), not typed by the teammate."""
        return self._person is not None

    @property
    def path(self) -> str:
        """The channel path ("session")."""
        return self._request.path

    @property
    def early_subscribe(self) -> Subscribe | None:
        """The subscribe the open carried, to serve before anything is received, or None."""
        sub = self._request.subscribe
        return None if sub is None else Subscribe(after=sub.after, tail=sub.tail)

    @property
    def early_conversation(self) -> str | None:
        """The conversation the open's early subscribe names (the one the channel follows, and
        its cursor counts in), if it said."""
        sub = self._request.subscribe
        return None if sub is None else sub.conversation

    @property
    def meta(self) -> dict[str, Any]:
        """The `open` meta as the relay forwarded it (including the relay's "peer")."""
        return self._request.meta

    async def hand_over(
        self,
        largest: int,
        build: Callable[[], bytes],
        *,
        joined: Callable[[], None],
        group: int = 0,
    ) -> None:
        """Send the `broadcast` message `build()` returns and join this channel to the host's
        broadcast `group` in the same instant (docs/application.md, "The broadcast"), then
        `joined()`."""

        def join() -> None:
            self._channel.join_broadcast(group)
            joined()

        await self.send_built(largest, build, then=join)

    @property
    def cast_groups(self) -> bool:
        """Whether the relay takes broadcast groups other than 0: one that does not gets a
        conversation's live tail on the channel instead (tunnel/host/session.py)."""
        return self._channel.cast_groups

    def leave_broadcast(self) -> None:
        """Take this channel out of the host's broadcast (harmless when it is not in it)."""
        self._channel.part_broadcast()

    async def start(self) -> None:
        """Send the host's answer if not sent yet; every send and receive does this first."""
        await self.keys()

    def close_soon(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close the channel without waiting."""
        super().close_soon(code, reason)
        if self._on_close is not None:
            self._on_close(self)


def open_host_channel(
    link_channel: LinkChannel,
    *,
    identity: HostIdentity,
    root_of: Callable[[str], bytes],
    paths: frozenset[str],
    on_close: Callable[[HostChannel], None] | None = None,
    invitation_of: Callable[[bytes], tuple[str, str, bytes] | None] | None = None,
    invited: Callable[[str], bool] | None = None,
) -> HostChannel:
    """Check an incoming channel's open and answer it (docs/security.md, "Opening a channel");
    raise ChannelRefusedError if refused. `root_of(role)` is the e2e root of that role's
    secret. `invitation_of(verifier)` is the (name, role, root) of the personal link with that
    verifier, or None once revoked: a channel the relay says came through a personal link is
    checked with that link's root only, so the proof, not the relay, binds the person.
    `invited(name)` says whether `name` is an invited person's: a role link's open under it is
    refused (4001), so nobody can appear under an invited person's name without their link."""
    request = parse_open(link_channel.path, link_channel.meta, paths=paths)
    person: str | None = None
    if request.invitation is None:
        root = root_of(request.role)
    else:
        found = None if invitation_of is None else invitation_of(request.invitation)
        if found is None:
            raise ChannelRefusedError(CloseCode.REVOKED, "personal link revoked")
        person, role, root = found
        if role != request.role:
            raise ChannelRefusedError(CloseCode.UNAUTHORIZED, "role does not match the token")
    offer = Offer(
        host_id=identity.host_id,
        role=request.role,
        name=request.name,
        salt=request.salt,
        teammate_key=request.teammate_key,
        subscribe=request.subscribe,
    )
    try:
        answered = answer_offer(identity, root=root, offer=offer, proof=request.proof)
    except OpeningError as exc:
        raise ChannelRefusedError(CloseCode(exc.code), exc.reason) from None
    # Only once the proof holds: nobody without a link learns which names are invited.
    if person is None and invited is not None and invited(request.name):
        raise ChannelRefusedError(
            CloseCode.REFUSED, "that name is an invited person's: choose another"
        )
    return HostChannel(link_channel, request, answered, on_close=on_close, person=person)


def close_quietly(channel: HostChannel, code: int, reason: str) -> None:
    """Close `channel` unless it is closed already."""
    with contextlib.suppress(ChannelClosedError):
        if channel.closed is None:
            channel.close_soon(code, reason)
