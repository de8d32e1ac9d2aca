"""`Notifier`: the host's notifications, running beside the session.

It follows the conversation log (`Notable` turns entries into events) and, for each request
that starts waiting, pushes to every subscription whose person has no page in front of them
(`focus`), once more after the reminder delay if it still waits, and a withdrawal to each
subscription pushed to once it ends. Webhooks and local commands get every event. Nothing here
waits on a push service, a webhook or a command: they run in their senders' own tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import anyio

from tunnel.log import Log
from tunnel.notify.endpoints import check_endpoint
from tunnel.notify.events import Decided, Notable, NotifyEvent, Waiting
from tunnel.notify.push import PushJob, PushSender
from tunnel.notify.settings import NotifySettings
from tunnel.notify.subscriptions import SAVE_INTERVAL, Owner, Subscription, Subscriptions
from tunnel.notify.vapid import VapidKey
from tunnel.notify.webpush import Option, request_payload, tag_of, topic_of, withdraw_payload

logger = logging.getLogger("tunnel.notify")

MAX_FOCUS_CHANNELS = 4096
"""Channels whose focus the notifier remembers; a host has at most as many channels open."""


class Listener(Protocol):
    """A sender told of every event (webhooks, commands): never waits."""

    def notify_nowait(self, event: NotifyEvent, *, conversation_id: str | None = None) -> None:
        """Queue `event` of `conversation_id`; never waits."""

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = ...) -> None: ...


class Notifier:
    """One host's notifications; `run` it beside the session."""

    def __init__(
        self,
        settings: NotifySettings,
        *,
        host_id: str,
        vapid: VapidKey | None,
        contact: str,
        subscriptions: Subscriptions,
        agent_name: Callable[[str], str],
        listeners: Sequence[Listener] = (),
    ) -> None:
        self.settings = settings
        self.subscriptions = subscriptions
        self._host_id = host_id
        self._vapid = vapid if settings.push else None
        self._agent_name = agent_name
        self._listeners = tuple(listeners)
        # One per conversation followed (a host serves several: docs/agents.md, "Several
        # agents"); each request is told apart by its id, random across conversations.
        self._notables: dict[str, Notable] = {}
        self._following: dict[str, anyio.CancelScope] = {}
        self._conversation_of: dict[str, str] = {}
        """The conversation of each request that waits or was pushed."""
        self._task_group: anyio.abc.TaskGroup | None = None
        self._log: Log | None = None
        self._focus: dict[object, tuple[Owner, bool]] = {}
        self._pushed: dict[str, set[str]] = {}
        """Per waiting request, the endpoints pushed to: each gets the withdrawal."""
        self._reminders: dict[str, anyio.CancelScope] = {}
        self._pusher: PushSender | None = None
        if self._vapid is not None:
            self._pusher = PushSender(
                vapid=self._vapid,
                subscriptions=subscriptions,
                contact=contact,
                extra_origins=settings.push_services,
                timeout=settings.send_timeout,
                concurrency=settings.max_sends,
                queue_size=settings.queue_size,
            )

    @property
    def push_key(self) -> str | None:
        """The VAPID public key for `ready`, None when this host sends no pushes."""
        return None if self._vapid is None else self._vapid.application_server_key

    # -- what teammates ask ---------------------------------------------------------------------

    def subscribe(self, subscription: Subscription) -> None:
        """Keep `subscription`; EndpointRefused or subscriptions.Refused (ValueErrors whose
        message is for the teammate) if not."""
        if self._vapid is None:
            raise ValueError("this host sends no push notifications")
        check_endpoint(subscription.endpoint, self.settings.push_services)
        self.subscriptions.add(subscription)

    def unsubscribe(self, endpoint: str, *, person: str | None) -> bool:
        """Drop the subscription of `endpoint` if the asker may: the invited `person` their
        own, a role link's holder (None) any role link's (knowing the endpoint, a capability)."""
        held = self.subscriptions.get(endpoint)
        if held is None:
            return False
        if person is not None:
            return self.subscriptions.remove(endpoint, owner=Owner(kind="person", id=person))
        return held.owner.kind == "browser" and self.subscriptions.remove(endpoint)

    def focus(self, channel: object, owner: Owner, focused: bool) -> None:
        """`channel`'s page is (or is no longer) in front of `owner`."""
        if channel not in self._focus and len(self._focus) >= MAX_FOCUS_CHANNELS:
            return
        self._focus[channel] = (owner, focused)

    def left(self, channel: object) -> None:
        """`channel` ended: its focus no longer counts."""
        self._focus.pop(channel, None)

    def focused(self, owner: Owner) -> bool:
        """Whether a page of `owner` says it is in front of them."""
        return any(o == owner and f for o, f in self._focus.values())

    def forget_person(self, name: str) -> None:
        """`/revoke NAME`: their subscriptions go with their link."""
        removed = self.subscriptions.remove_person(name)
        if removed:
            logger.info("dropped %d push subscription(s) of %s", removed, name)

    def forget_role_links(self, role_links: str | None = None) -> None:
        """`/revoke`: every role link's subscriptions go with the links; those made through the
        new ones are kept under `role_links` (`role_links_mark`)."""
        self.subscriptions.role_links = role_links
        removed = self.subscriptions.remove_role_links()
        if removed:
            logger.info("dropped %d push subscription(s) of the role links", removed)

    # -- running --------------------------------------------------------------------------------

    async def run(
        self,
        log: Log,
        conversation_id: str,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Follow `conversation_id` (and those `follow` adds) from its end and notify until
        cancelled."""
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self.subscriptions.run)
                if self._pusher is not None:
                    await tg.start(self._pusher.run)
                for listener in self._listeners:
                    await tg.start(listener.run)
                tg.start_soon(self._save_subscriptions)
                self._task_group, self._log = tg, log
                await tg.start(self._follow, log, conversation_id)
                task_status.started()
        finally:
            self._task_group = None
            self.subscriptions.flush()

    async def follow(self, conversation_id: str) -> None:
        """Notify of `conversation_id` too, from its end on (a conversation a driver started);
        nothing when it is followed already or the notifier does not run."""
        if self._task_group is None or self._log is None or conversation_id in self._following:
            return
        await self._task_group.start(self._follow, self._log, conversation_id)

    def unfollow(self, conversation_id: str) -> None:
        """Stop notifying of `conversation_id` (closed): its waiting requests are forgotten,
        and what was pushed of them withdrawn (nobody can answer them any more)."""
        scope = self._following.pop(conversation_id, None)
        if scope is not None:
            scope.cancel()
        self._notables.pop(conversation_id, None)
        for request_id in [r for r, c in self._conversation_of.items() if c == conversation_id]:
            self._withdraw(request_id)

    async def _follow(
        self, log: Log, conversation_id: str, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        tg = self._task_group
        assert tg is not None
        info = await log.get_conversation(conversation_id)
        after = -1 if info is None else info.last_seq
        notable = self._notables.setdefault(conversation_id, Notable())
        with anyio.CancelScope() as scope:
            self._following[conversation_id] = scope
            async with log.subscribe(conversation_id, after=after) as sub:
                task_status.started()
                while True:
                    for entry in await sub.receive_batch():
                        for event in notable.receive(entry):
                            self._on_event(event, tg, conversation_id)

    async def _save_subscriptions(self) -> None:
        """Save the teammates' changes the subscriptions held back (`SAVE_INTERVAL`)."""
        while True:
            await anyio.sleep(SAVE_INTERVAL)
            self.subscriptions.flush()

    def _on_event(self, event: NotifyEvent, tg: anyio.abc.TaskGroup, conversation_id: str) -> None:
        for listener in self._listeners:
            listener.notify_nowait(event, conversation_id=conversation_id)
        if self._pusher is None:
            return
        if isinstance(event, Waiting):
            self._conversation_of[event.request_id] = conversation_id
            self._push_request(event, reminder=False)
            if self.settings.reminder > 0:
                scope = anyio.CancelScope()
                self._reminders[event.request_id] = scope
                tg.start_soon(self._remind, event, scope)
        elif isinstance(event, Decided):
            self._withdraw(event.request_id)

    def _withdraw(self, request_id: str) -> None:
        """The request no longer waits: no reminder, and each push of it withdrawn."""
        self._conversation_of.pop(request_id, None)
        if request_id in self._reminders:
            self._reminders.pop(request_id).cancel()
        if self._pusher is None:
            return
        payload = withdraw_payload(host_id=self._host_id, request_id=request_id)
        topic = topic_of(tag_of(self._host_id, request_id))
        for endpoint in self._pushed.pop(request_id, set()):
            subscription = self.subscriptions.get(endpoint)
            if subscription is not None:
                self._pusher.send_nowait(
                    PushJob(subscription=subscription, payload=payload, topic=topic)
                )

    async def _remind(self, waiting: Waiting, scope: anyio.CancelScope) -> None:
        with scope:
            await anyio.sleep(self.settings.reminder)
            if self._reminders.get(waiting.request_id) is scope:
                del self._reminders[waiting.request_id]
            conversation_id = self._conversation_of.get(waiting.request_id, "")
            notable = self._notables.get(conversation_id)
            if notable is not None and notable.waiting(waiting.request_id) is not None:
                self._push_request(waiting, reminder=True)

    def _push_request(self, waiting: Waiting, *, reminder: bool) -> None:
        assert self._pusher is not None
        topic = topic_of(tag_of(self._host_id, waiting.request_id))
        pushed = self._pushed.setdefault(waiting.request_id, set())
        options = [Option(option_id=o.option_id, name=o.name, kind=o.kind) for o in waiting.options]
        focused = {owner for owner, in_front in self._focus.values() if in_front}
        for subscription in self.subscriptions.all():
            if subscription.owner in focused:
                continue
            person = subscription.owner.id if subscription.owner.kind == "person" else None
            answerable = waiting.may_answer(role=subscription.role, person=person)
            try:
                payload = request_payload(
                    host_id=self._host_id,
                    request_id=waiting.request_id,
                    agent=self._agent_name(self._conversation_of.get(waiting.request_id, "")),
                    title=waiting.title,
                    kind=waiting.kind,
                    command=waiting.command,
                    options=options if answerable else [],
                    reminder=reminder,
                )
            except ValueError:
                logger.warning("the request %s does not fit a push", waiting.request_id)
                return
            job = PushJob(subscription=subscription, payload=payload, topic=topic)
            if self._pusher.send_nowait(job):
                pushed.add(subscription.endpoint)
