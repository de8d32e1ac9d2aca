"""`PushSender`: the host's own POSTs to push services (RFC 8030 section 5), off the session's
path.

`send_nowait` never waits: a push goes into a bounded queue (dropped, and said once, when it is
full), a few workers POST at once, each with a timeout; redirects are never followed and an
answer's body is never read. A push whose subscription was dropped while it waited (a revoked
person's) is not sent. A push service answering 404 or 410 says the subscription is gone: it is
dropped. Other failures are logged once per endpoint until one succeeds again; the endpoint
itself (a capability) never goes in the log, only its origin.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from tunnel.notify.endpoints import EndpointRefused, check_endpoint
from tunnel.notify.subscriptions import Subscription, Subscriptions
from tunnel.notify.vapid import VapidKey, origin_of
from tunnel.notify.webpush import encrypt, push_headers

logger = logging.getLogger("tunnel.notify")

GONE = (404, 410)
"""What a push service answers for a subscription that no longer exists (RFC 8030 section
7.3): the host drops it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PushJob:
    """One push: to whom, what (plaintext), and its topic."""

    subscription: Subscription
    payload: bytes
    topic: str


class PushSender:
    """POSTs pushes in the background; `run` it in a task group, then `send_nowait`."""

    def __init__(
        self,
        *,
        vapid: VapidKey,
        subscriptions: Subscriptions,
        contact: str,
        extra_origins: frozenset[str] = frozenset(),
        timeout: float,
        concurrency: int,
        queue_size: int,
        on_sent: Callable[[PushJob, int | None], None] | None = None,
    ) -> None:
        """`on_sent(job, status)` is told how each push ended (status None: no answer)."""
        self._vapid = vapid
        self._subscriptions = subscriptions
        self._contact = contact
        self._extra_origins = extra_origins
        self._timeout = timeout
        self._concurrency = concurrency
        self._on_sent = on_sent
        self._send: MemoryObjectSendStream[PushJob]
        self._receive: MemoryObjectReceiveStream[PushJob]
        self._send, self._receive = anyio.create_memory_object_stream[PushJob](queue_size)
        self._failing: set[str] = set()
        self._full_said = False

    def send_nowait(self, job: PushJob) -> bool:
        """Queue `job`; False (said once in the log) if the queue is full."""
        try:
            self._send.send_nowait(job)
        except anyio.WouldBlock:
            if not self._full_said:
                self._full_said = True
                logger.warning("too many pushes waiting; some are dropped")
            return False
        self._full_said = False
        return True

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """POST queued pushes until cancelled."""
        timeout = httpx.Timeout(self._timeout)
        async with (
            httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client,
            anyio.create_task_group() as tg,
        ):
            for _ in range(self._concurrency):
                tg.start_soon(self._work, client)
            task_status.started()

    async def _work(self, client: httpx.AsyncClient) -> None:
        async for job in self._receive:
            status: int | None = None
            try:
                # The timeout covers the whole exchange, however slowly the service trickles.
                with anyio.move_on_after(self._timeout):
                    status = await self._post(client, job)
            except Exception as exc:  # a push never ends the session
                # httpx's and the network's errors, and whatever the VAPID or ECE library
                # raises for an endpoint or key it dislikes: said once, by its type only.
                self._failed(job, type(exc).__name__)
            else:
                if status is None:
                    self._failed(job, "no answer in time")
            if self._on_sent is not None:
                self._on_sent(job, status)

    async def _post(self, client: httpx.AsyncClient, job: PushJob) -> int:
        endpoint = job.subscription.endpoint
        if self._subscriptions.get(endpoint) != job.subscription:
            # Dropped (or replaced) while this push waited its turn: a revoked person, a
            # browser that turned notifications off, gets nothing more.
            return 0
        try:
            # Checked again: the host may have dropped a --push-service since it was taken.
            check_endpoint(endpoint, self._extra_origins)
        except EndpointRefused:
            self._subscriptions.remove(endpoint)
            return 0
        body = encrypt(job.payload, p256dh=job.subscription.p256dh, auth=job.subscription.auth)
        headers = push_headers(
            self._vapid, endpoint, contact=self._contact, now=time.time(), topic=job.topic
        )
        # Only the status line counts: the body is never read, so however large a service's
        # answer, it costs no memory (closing the stream drops the connection).
        async with client.stream("POST", endpoint, content=body, headers=headers) as response:
            status = response.status_code
        if status in GONE:
            if self._subscriptions.remove(endpoint):
                logger.info("a push subscription at %s is gone; dropped", origin_of(endpoint))
        elif 200 <= status < 300:
            self._failing.discard(endpoint)
        else:
            self._failed(job, f"HTTP {status}")
        return status

    def _failed(self, job: PushJob, why: str) -> None:
        endpoint = job.subscription.endpoint
        if endpoint in self._failing:
            return
        if len(self._failing) > 4 * len(self._subscriptions) + 16:
            self._failing.clear()  # bounded: endpoints dropped since are forgotten
        self._failing.add(endpoint)
        logger.warning("a push to %s failed (%s)", origin_of(endpoint), why)
