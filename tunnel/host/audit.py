"""`HeadSigner`: the host signs its conversation's chain head after each turn and on shutdown,
and keeps the signatures in the log's own file (docs/log.md, "The audit chain").

It follows the conversation like a teammate does (a subscription from seq 0), extending the
chain by each item, and signs when the agent's `status` event says the turn ended (`idle`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

import anyio
from anyio.abc import TaskStatus

from tunnel.e2e.identity import HostIdentity
from tunnel.log import Log
from tunnel.log.chain import Chain, SignedHead, head_message
from tunnel.log.errors import LogError
from tunnel.log.item import Event, Item
from tunnel.log.ndjson import SignatureStore

__all__ = ["HeadSigner", "sign_head"]

logger = logging.getLogger("tunnel.host.audit")

SHUTDOWN_TIMEOUT: Final = 5.0
"""Seconds the last signature may take on shutdown (the last items are read first)."""

_PAGE: Final = 1000


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
    ) -> None:
        self._identity = identity
        self._log = log
        self._store = store
        self._chain = Chain(conversation_id)
        self._signed_seq = -1
        self._on_signed = on_signed
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
        async with self._log.subscribe(cid, after=-1) as subscription:
            task_status.started()
            async for entry in subscription:
                if isinstance(entry, Item):
                    self._chain.add(entry)
                elif _turn_ended(entry):
                    await self.sign()

    async def sign(self) -> SignedHead | None:
        """Sign the head the chain has reached, if no signature covers it yet."""
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
                    self._chain.add(item)
            await self.sign()
        except (LogError, ValueError) as exc:
            logger.warning("could not sign the log's head on shutdown: %s", exc)


def _turn_ended(event: Event) -> bool:
    return event.kind == "status" and event.data.get("state") == "idle"
