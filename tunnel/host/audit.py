"""`HeadSigner`: the host signs its conversation's chain head after each turn and on shutdown,
and keeps the signatures in the log's own file (docs/log.md, "The audit chain").

It follows the conversation like a teammate does (a subscription from seq 0), extending the
chain by each item, and signs when the agent's `status` event says the turn ended (`idle`), and
every `interval` seconds if items came meanwhile (a terminal agent has no turns). Each
signature is also published as a `head` event, so every teammate can check the items it holds
(docs/application.md, "Events"); a joiner gets the latest one after its snapshot, with the hash
its first item chains from (`head_event`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

import anyio
from anyio.abc import TaskStatus

from tunnel.e2e.identity import HostIdentity
from tunnel.log import Log
from tunnel.log.chain import Chain, SignedHead, head_message
from tunnel.log.errors import LogError
from tunnel.log.item import Event, Item
from tunnel.log.ndjson import SignatureStore

__all__ = ["HEAD_EVENT", "HeadSigner", "head_event_data", "sign_head"]

logger = logging.getLogger("tunnel.host.audit")

SHUTDOWN_TIMEOUT: Final = 5.0
"""Seconds the last signature may take on shutdown (the last items are read first)."""

SIGN_INTERVAL: Final = 60.0
"""Seconds between signatures while items come without a turn ending."""

_PAGE: Final = 1000

HEAD_EVENT: Final = "head"
"""The event that carries a signed chain head to teammates."""


def head_event_data(signed: SignedHead, anchor: tuple[int, bytes] | None = None) -> dict[str, Any]:
    """A `head` event's data: the signature record without its `kind`, and with `anchor`, the
    hash of the item before a joiner's first (`{"seq", "hash"}`), which its check starts from."""
    data: dict[str, Any] = {k: v for k, v in signed.to_wire().items() if k != "kind"}
    if anchor is not None:
        data["anchor"] = {"seq": anchor[0], "hash": anchor[1].hex()}
    return data


def sign_head(
    identity: HostIdentity, conversation_id: str, seq: int, head: bytes, *, now: datetime
) -> SignedHead:
    """The host's signature over (conversation, seq, head)."""
    message = head_message(identity.host_id, conversation_id, seq, head)
    return SignedHead(
        conversation_id=conversation_id,
        seq=seq,
        hash=head,
        host_id=identity.host_id,
        public_key=identity.public_key,
        signature=identity.sign(message),
        signed_at=now,
    )


class HeadSigner:
    """Signs the chain head of one conversation; run `run()` in the share's task group."""

    def __init__(
        self,
        *,
        identity: HostIdentity,
        log: Log,
        store: SignatureStore,
        conversation_id: str,
        on_signed: Callable[[SignedHead], None] | None = None,
        interval: float | None = SIGN_INTERVAL,
    ) -> None:
        """`interval`: seconds between signatures while no turn ends (None: only at turn ends
        and on shutdown)."""
        self._identity = identity
        self._log = log
        self._store = store
        self._chain = Chain(conversation_id)
        # Every item's hash, 32 bytes a seq, for the anchor of a joiner's first item: a log of a
        # million items holds 32 MB here.
        self._hashes = bytearray()
        self._signed_seq = -1
        self._on_signed = on_signed
        self._interval = interval
        self._signing = anyio.Lock()
        self.latest: SignedHead | None = None
        """The newest signature made (or found stored at start), None before any."""

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Follow the conversation and sign after each turn, until cancelled; then call
        `close()` once the agent has stopped writing."""
        cid = self._chain.conversation_id
        stored = await self._store.signatures(cid)
        mine = [s for s in stored if s.host_id == self._identity.host_id]
        if mine:
            self.latest = max(mine, key=lambda s: s.seq)
            self._signed_seq = self.latest.seq
        async with (
            anyio.create_task_group() as tg,
            self._log.subscribe(cid, after=-1) as subscription,
        ):
            if self._interval is not None:
                tg.start_soon(self._sign_every, self._interval)
            task_status.started()
            async for entry in subscription:
                if isinstance(entry, Item):
                    self._add(entry)
                elif _turn_ended(entry):
                    await self.sign()

    async def _sign_every(self, interval: float) -> None:
        while True:
            await anyio.sleep(interval)
            await self.sign()

    def _add(self, item: Item) -> None:
        self._hashes += self._chain.add(item)

    def hash_at(self, seq: int) -> bytes | None:
        """The chain's hash at `seq`, None if the signer has not reached it."""
        if not 0 <= seq <= self._chain.seq:
            return None
        return bytes(self._hashes[seq * 32 : seq * 32 + 32])

    def head_event(self, first_seq: int) -> Event | None:
        """The latest signed head as a `head` event for a teammate whose first item is
        `first_seq`, with the hash that item chains from; None before any signature."""
        latest = self.latest
        if latest is None:
            return None
        anchor_hash = self.hash_at(first_seq - 1)
        anchor = None if anchor_hash is None else (first_seq - 1, anchor_hash)
        return Event(
            conversation_id=latest.conversation_id,
            kind=HEAD_EVENT,
            data=head_event_data(latest, anchor),
        )

    async def sign(self) -> SignedHead | None:
        """Sign the head the chain has reached, if no signature covers it yet."""
        async with self._signing:
            return await self._sign()

    async def _sign(self) -> SignedHead | None:
        head = self._chain.head
        if head is None or self._chain.seq <= self._signed_seq:
            return None
        signed = sign_head(
            self._identity, self._chain.conversation_id, self._chain.seq, head,
            now=datetime.now(UTC),
        )  # fmt: skip
        await self._store.add_signatures([signed])
        self._signed_seq = signed.seq
        self.latest = signed
        logger.debug("signed %s up to seq %d", signed.conversation_id, signed.seq)
        if self._on_signed is not None:
            self._on_signed(signed)
        with contextlib.suppress(LogError):
            await self._log.publish(
                Event(conversation_id=signed.conversation_id, kind=HEAD_EVENT,
                      data=head_event_data(signed))
            )  # fmt: skip
        return signed

    async def close(self) -> None:
        """Sign the log's last item: on shutdown, after the agent stopped, so that what it wrote
        while stopping is covered. Shielded, and bounded by `SHUTDOWN_TIMEOUT`."""
        with anyio.move_on_after(SHUTDOWN_TIMEOUT, shield=True):
            await self._sign_the_rest()

    async def _sign_the_rest(self) -> None:
        try:
            while page := await self._log.query(
                self._chain.conversation_id, after=self._chain.seq, limit=_PAGE
            ):
                for item in page:
                    self._add(item)
            await self.sign()
        except (LogError, ValueError) as exc:
            logger.warning("could not sign the log's head on shutdown: %s", exc)


def _turn_ended(event: Event) -> bool:
    return event.kind == "status" and event.data.get("state") == "idle"
