"""The host's dial-out loop: register with the relay, serve teammate channels, reconnect.

`Host.run` dials `/v1/host` (`tunnel.link.dial`), answers the relay's challenge with its Ed25519
signature and registers the verifiers of its share links (docs/relay.md, "Hello and admission").
Each channel the relay opens becomes a `HostChannel` served by `handler` in the host's task group.
When the link dies (keepalive timeout, relay restart) the host redials with capped exponential
backoff, capped low while the relay's port refuses connections (a restart); the links stay valid
because key and secrets are the same. Every hello carries this process's instance, so the relay
replaces a stale connection of this process but refuses a second process with the same key (4009).
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from secrets import token_bytes
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from tunnel.e2e.crypto import DecryptionError, ShareLink, ShareSecrets, e2e_root
from tunnel.e2e.identity import HostIdentity
from tunnel.errors import TunnelError, describe_close
from tunnel.handshake import (
    ADMISSION_PATH,
    INSTANCE_SIZE,
    REGISTER_PATH,
    HelloError,
    RelayHello,
    host_hello,
    registration,
)
from tunnel.host.channel import (
    ChannelRefusedError,
    HostChannel,
    close_quietly,
    open_host_channel,
)
from tunnel.host.invitations import Invitation, Invitations
from tunnel.host.replay_link import ReplayLink
from tunnel.host.settings import HostSettings
from tunnel.link import (
    ChannelClosedError,
    ChannelMux,
    Link,
    LinkChannel,
    LinkClosedError,
    dial,
)
from tunnel.process.backoff import Backoff
from tunnel.proto.codes import FINAL_CODES, CloseCode, code_name

logger = logging.getLogger("tunnel.host")

ChannelHandler = Callable[[HostChannel], Awaitable[None]]
"""Serves one channel until it ends; runs in the host's task group."""

JoinHook = Callable[[HostChannel], Awaitable[bool]]
"""Decides whether to serve a channel (e.g. asks the user); False closes it with 4001."""

SHUTDOWN_GRACE = 2.0
"""Seconds to close the link cleanly (1001) when the host stops."""


class HostRefusedError(TunnelError):
    """The relay refused this host for good (bad signature, key not authorized, another protocol
    version, another host process online with the same key): a close code of FINAL_CODES. Not
    retried."""

    def __init__(
        self, code: int, reason: str, *, host_id: str = "", key_file: Path | None = None
    ) -> None:
        if code == CloseCode.HOST_ID_IN_USE:
            message = (
                f"another host is sharing with this key (host id {host_id}, key file {key_file});"
                " stop it, or start this one with --replace to take over"
            )
        else:
            message = (
                f"the relay refused this host: {code_name(code)} ({reason or 'no reason given'})."
                " Check that --relay is the relay's public URL and that the key is authorized."
            )
        super().__init__(message, code=code, reason=reason, by_peer=True)


async def _admit_all(channel: HostChannel) -> bool:
    return True


class Host:
    """One shared host: identity, share secrets, the link to the relay and its channels."""

    def __init__(
        self,
        settings: HostSettings,
        handler: ChannelHandler,
        *,
        on_join: JoinHook | None = None,
        identity: HostIdentity | None = None,
        secrets: ShareSecrets | None = None,
        invitations: Invitations | None = None,
    ) -> None:
        self.settings = settings
        self._handler = handler
        self._on_join = on_join if on_join is not None else _admit_all
        self.identity = identity or HostIdentity.load_or_create(settings.resolved_key_file)
        self._secrets = secrets or ShareSecrets.load_or_create(settings.resolved_secrets_file)
        self.invitations = invitations or Invitations.load(settings.resolved_invitations_file)
        """The personal links (`invite`, `revoke_person`)."""
        # Bumped on every change of the verifiers (revoke, invite); the hello notes the one it
        # carried, so a change made while it was on its way is registered once it is admitted.
        self._verifiers_version = 0
        self._hello_verifiers_version = 0
        self._channels: set[HostChannel] = set()
        self._link: Link | None = None
        self._mux: ChannelMux | None = None
        self._redial = anyio.Event()
        self._task_group: TaskGroup | None = None
        # The same in every hello of this object, so the relay knows a reconnect of ours.
        self._instance = token_bytes(INSTANCE_SIZE)
        self._registered = False
        self._registered_again = anyio.Event()
        """Set by each new registration: `revoke` waits for it, so the links it hands out work."""

    def set_join_hook(self, on_join: JoinHook) -> None:
        """Decide from now on whether to serve each channel with `on_join`."""
        self._on_join = on_join

    # -- public state -------------------------------------------------------------------------

    @property
    def host_id(self) -> str:
        """This host's id, derived from its public key."""
        return self.identity.host_id

    @property
    def view_link(self) -> ShareLink:
        """The share link that lets a teammate watch."""
        return self._secrets.link("view", self.settings.relay_url, self.host_id)

    @property
    def drive_link(self) -> ShareLink:
        """The share link that lets a teammate watch and drive."""
        return self._secrets.link("drive", self.settings.relay_url, self.host_id)

    @property
    def link(self) -> Link | None:
        """The link to the relay while the host is registered on one (what the broadcast casts
        on), else None."""
        link = self._link
        return link if link is not None and link.closed is None else None

    @property
    def connected(self) -> bool:
        """Whether the host is registered with the relay right now (as far as it knows)."""
        return self._link is not None and self._link.closed is None

    async def revoke(self) -> None:
        """Invalidate both share links at once: new secrets, new verifiers, channels closed 4008.

        The host re-registers on a new connection; the relay then closes (4008) every attached
        teammate whose token no longer matches. Personal links stay valid: their holders'
        channels end with the old connection (4005) and their clients open new ones. Get the new
        links from `view_link`/`drive_link`.
        """
        self._secrets = self._secrets.rotate()
        self._secrets.save(self.settings.resolved_secrets_file)
        self._verifiers_version += 1
        for channel in list(self._channels):
            if channel.person is None:  # personal links stay valid
                close_quietly(channel, CloseCode.REVOKED, "share links revoked")
                self._channels.discard(channel)
        logger.info("share links revoked; re-registering with new verifiers")
        self._registered_again = anyio.Event()
        self._redial.set()
        # Until the new hello is in, the relay still holds the old verifiers and would refuse the
        # new links: whoever prints them waits for it (bounded: offline, the next dial has them).
        with anyio.move_on_after(self.settings.hello_timeout):
            await self._registered_again.wait()

    async def invite(self, name: str, role: str) -> ShareLink:
        """Invite `name` in `role`: a personal link of their own, saved beside the key and
        registered with the relay before this returns if the host is online (else at its next
        hello).

        Raises InvitationError (one line for the user) for a bad name or role, or over the
        relay's MAX_INVITATIONS. Inviting a name again replaces that person's link.
        """
        if self.invitations.get(name) is not None:
            self._close_person(name, "personal link replaced")
        invitation = self.invitations.add(name, role)
        self._verifiers_version += 1
        logger.info("invited %s to %s", name, role)
        await self._register()
        return self.link_of(invitation)

    async def share_replay(self, replay: ReplayLink) -> Invitation:
        """A replay link of `replay` (tunnel/host/replay_link.py): a personal link of role
        `view` whose channels see only that conversation up to its seq, registered as `invite`
        registers one. Revoked like one (`revoke_person` with its name). Raises InvitationError
        over the relay's MAX_INVITATIONS."""
        invitation = self.invitations.add_replay(replay)
        self._verifiers_version += 1
        logger.info("made replay link %s", invitation.name)
        await self._register()
        return invitation

    def link_of(self, invitation: Invitation) -> ShareLink:
        """`invitation`'s personal link."""
        return invitation.link(self.settings.relay_url, self.host_id)

    async def revoke_person(self, name: str) -> None:
        """End `name`'s personal link and their channels (4008); nobody else's.

        The relay gets the verifiers without theirs on this same connection (so every other
        channel stays open) and closes their link (4008); their link then fails at admission
        (4002). Raises InvitationError if nobody is invited under that name.
        """
        self.invitations.remove(name)
        self._verifiers_version += 1
        self._close_person(name, "personal link revoked")
        logger.info("revoked the personal link of %s", name)
        await self._register()

    def people(self) -> list[tuple[Invitation, int, float | None]]:
        """Each invitation with how many of its channels are open and when one last closed
        (None if never)."""
        open_channels: dict[str, int] = {}
        for channel in self._channels:
            if channel.person is not None:
                open_channels[channel.person] = open_channels.get(channel.person, 0) + 1
        return [(i, open_channels.get(i.name, 0), i.last_seen) for i in self.invitations.all()]

    def _close_person(self, name: str, reason: str) -> None:
        for channel in list(self._channels):
            if channel.person == name:
                close_quietly(channel, CloseCode.REVOKED, reason)
                self._channels.discard(channel)

    async def _register(self) -> None:
        """Put the current verifiers in force at the relay on the live link (REGISTER_PATH),
        so nobody else's channel closes; without a live link, the next hello carries them."""
        mux = self._mux
        if mux is None or mux.link.closed is not None:
            return
        meta = registration(
            self._secrets.verifiers(self.host_id), self.invitations.registered(self.host_id)
        )
        try:
            probe = mux.open_channel(REGISTER_PATH, meta)
            with anyio.fail_after(self.settings.hello_timeout):
                await probe.receive()
        except ChannelClosedError as closed:
            if closed.code == CloseCode.NORMAL:
                return
            logger.warning("the relay refused the personal links: %s", closed.reason)
        except (TimeoutError, LinkClosedError):
            pass
        # Not confirmed: a new connection's hello carries the verifiers instead.
        self._redial.set()

    # -- running ------------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[Host] = anyio.TASK_STATUS_IGNORED) -> None:
        """Stay registered until cancelled; reports `self` through task_status once registered.

        Raises HostRefusedError if the relay refuses this host for good.
        """
        async with anyio.create_task_group() as tg:
            self._task_group = tg
            try:
                refused = await self._dial_forever(tg, task_status)
            finally:
                with anyio.move_on_after(SHUTDOWN_GRACE, shield=True):
                    await self._shutdown()
                tg.cancel_scope.cancel()
        # Raised outside the task group, so callers see it as is, not in an ExceptionGroup.
        raise refused

    async def _dial_forever(self, tg: TaskGroup, task_status: TaskStatus[Host]) -> HostRefusedError:
        backoff = Backoff(initial=self.settings.backoff_initial, maximum=self.settings.backoff_max)
        started = False
        lost = False  # a link was lost since the last registration
        last_failure: str | None = None
        while True:
            self._redial = anyio.Event()
            try:
                link = await tg.start(self._serve_link)
            except (OSError, LinkClosedError, HelloError) as exc:
                if isinstance(exc, LinkClosedError) and exc.by_peer and exc.code in FINAL_CODES:
                    return self._refused(exc)
                delay = backoff.next_delay(refused=_refused_at_once(exc))
                # Said once per kind of failure: while the relay restarts the host retries about
                # every second, and the console would fill with the same line.
                failure = _describe(exc)
                log = logger.info if failure == last_failure else logger.warning
                log("cannot register with the relay (%s); retrying in %.1fs", failure, delay)
                last_failure = failure
                await anyio.sleep(delay)
                continue
            self._registered = True
            self._registered_again.set()
            if not started:
                started = True
                task_status.started(self)
            elif lost:
                # As loud as the warning that the link was lost, so whoever saw that sees this.
                logger.warning("online again: registered with %s", self.settings.relay_url)
            lost, last_failure = False, None
            closed = await self._wait_link(link, backoff)
            if closed is None:
                continue  # redial requested: the new link replaces this one
            if closed.by_peer and closed.code in FINAL_CODES:
                return self._refused(closed)
            lost = True
            delay = backoff.next_delay()
            logger.warning(
                "link to the relay closed (%s); reconnecting in %.1fs", _describe(closed), delay
            )
            with anyio.move_on_after(delay):
                await self._redial.wait()

    def _refused(self, closed: LinkClosedError) -> HostRefusedError:
        return HostRefusedError(
            closed.code,
            closed.reason,
            host_id=self.host_id,
            key_file=self.settings.resolved_key_file,
        )

    async def _wait_link(self, link: Link, backoff: Backoff) -> LinkClosedError | None:
        """Wait until `link` closes (return why) or a redial is requested (return None)."""
        result: list[LinkClosedError | None] = []
        async with anyio.create_task_group() as tg:

            async def closed() -> None:
                result.append(await link.wait_closed())
                tg.cancel_scope.cancel()

            async def redial() -> None:
                await self._redial.wait()
                result.append(None)
                tg.cancel_scope.cancel()

            async def stable() -> None:
                await anyio.sleep(self.settings.stable_after)
                backoff.reset()

            tg.start_soon(closed)
            tg.start_soon(redial)
            tg.start_soon(stable)
        return result[0] if result else None

    async def _shutdown(self) -> None:
        link = self._link
        if link is None or link.framing.is_closed:
            return
        for channel in list(self._channels):
            close_quietly(channel, CloseCode.GOING_AWAY, "host stopped")
        # The link's own tasks are being cancelled with ours: close the socket directly.
        await link.framing.close(CloseCode.GOING_AWAY, "host stopped")

    async def _serve_link(self, *, task_status: TaskStatus[Link]) -> None:
        """Dial, hello, then serve channels until the link closes. Started once registered."""
        async with dial(
            self.settings.relay_url,
            "/v1/host",
            self._hello,
            self.settings.dial,
            backlog=64,
            framing=self.settings.framing,
        ) as mux:
            await _confirm_admission(mux, self.settings.hello_timeout)
            previous, self._link = self._link, mux.link
            self._mux = mux
            if self._hello_verifiers_version != self._verifiers_version:
                assert self._task_group is not None
                self._task_group.start_soon(self._register)
            logger.info("registered with %s as %s", self.settings.relay_url, self.host_id)
            if previous is not None and previous.closed is None:
                # The relay replaces the previous connection itself (so its teammates see the
                # new verifiers, not "host gone"); drop it only if the relay does not.
                assert self._task_group is not None
                self._task_group.start_soon(_close_later, previous)
            task_status.started(mux.link)
            await self._accept_loop(mux)

    def _hello(self, relay: RelayHello) -> dict[str, Any]:
        self._hello_verifiers_version = self._verifiers_version
        return host_hello(
            self.identity,
            relay,
            relay_url=self.settings.relay_url,
            capabilities=self.settings.capabilities,
            verifiers=self._secrets.verifiers(self.host_id),
            invited=self.invitations.registered(self.host_id),
            instance=self._instance,
            # Only to start with: once this host has been replaced, it stops (4009) rather than
            # take the host id back.
            replace=self.settings.replace and not self._registered,
            limits=self.settings.limits,
        )

    async def _accept_loop(self, mux: ChannelMux) -> None:
        assert self._task_group is not None
        while True:
            try:
                link_channel = await mux.accept()
            except LinkClosedError:
                return
            self._task_group.start_soon(self._serve_channel, link_channel)

    def _root_of(self, role: str) -> bytes:
        """The e2e root of `role`'s current secret (docs/security.md)."""
        return e2e_root(self._secrets.secret_for(role), self.host_id)

    def _invitation_of(self, verifier: bytes) -> tuple[str, str, bytes] | None:
        """(name, role, e2e root) of the personal link with `verifier`, None if revoked."""
        invitation = self.invitations.by_verifier(verifier, self.host_id)
        if invitation is None:
            return None
        return invitation.name, invitation.role, invitation.root(self.host_id)

    async def _serve_channel(self, link_channel: LinkChannel) -> None:
        try:
            channel = open_host_channel(
                link_channel,
                identity=self.identity,
                root_of=self._root_of,
                paths=self.settings.paths,
                on_close=self._channels.discard,
                invitation_of=self._invitation_of,
                invited=self.invitations.has_name,
            )
        except ChannelRefusedError as refused:
            logger.info("refused a channel: %d %s", refused.code, refused)
            link_channel.close_soon(refused.code, str(refused))
            return
        self._channels.add(channel)
        try:
            if not await self._on_join(channel):
                close_quietly(channel, CloseCode.REFUSED, "the host declined")
                return
            await self._handler(channel)
        except ChannelClosedError:
            pass
        except DecryptionError:
            # Already closed with 4003 by HostChannel.receive; one line, no details.
            logger.info(
                "closed a %s channel: %d decryption failed",
                channel.role,
                CloseCode.DECRYPTION_FAILED,
            )
        except Exception:
            logger.exception("channel handler failed")
            close_quietly(channel, CloseCode.INTERNAL_ERROR, "host error")
        finally:
            self._channels.discard(channel)
            close_quietly(channel, CloseCode.NORMAL, "")
            if channel.person is not None:
                try:
                    self.invitations.seen(channel.person, time.time())
                except OSError as exc:
                    # Only /people's "last seen" is lost: the channel is over either way.
                    logger.warning("cannot note when %s was last seen: %s", channel.person, exc)


async def _confirm_admission(mux: ChannelMux, within: float) -> None:
    """Return once the relay has accepted our hello; raise LinkClosedError if it refused it.

    Nothing is shown as registered (links, "online again") before this: a host the relay refuses
    (another host online with this key, a key it does not accept) must not look as if it shares.
    """
    probe = mux.open_channel(ADMISSION_PATH, {})
    try:
        with anyio.fail_after(within):
            await probe.receive()
    except TimeoutError:
        probe.close_soon(CloseCode.NORMAL, "")
        raise LinkClosedError(
            CloseCode.PROTOCOL_ERROR, "the relay did not confirm the hello", by_peer=False
        ) from None
    except ChannelClosedError:
        closed = mux.link.closed
        if closed is not None:
            raise closed from None
        return
    # Anything else on that channel is not how a relay answers; a channel is cheap to drop.
    probe.close_soon(CloseCode.PROTOCOL_ERROR, "unexpected data")


async def _close_later(link: Link) -> None:
    with anyio.move_on_after(5):
        await link.wait_closed()
        return
    link.close_soon(CloseCode.GOING_AWAY, "replaced")


def _refused_at_once(exc: BaseException) -> bool:
    """Whether nothing listens on the relay's port (as while it restarts), not a timeout."""
    return isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED


def _describe(exc: BaseException) -> str:
    if isinstance(exc, LinkClosedError):
        return describe_close(exc.code, exc.reason)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
