"""`WebhookSender`: `tunnel host --notify URL`, a small POST for each notification event.

The body is JSON, content-free unless the host asks for details (`--notify-details`): which
host and conversation, what happened, the tool's kind (`question` for a question of the agent's)
and who may answer, never the request's title or command (nor the question's message). A URL
written `ntfy+https://...` (or `ntfy+http://`) gets ntfy's form instead: a plain-text body with
Title, Tags and Priority headers, POSTed to the URL without `ntfy+`.
Each POST is tried a bounded number of times with the reconnect backoff between tries, in the
sender's own task: the session never waits for it. The URL may hold a secret (a token in its
path), so only its origin is ever logged.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from tunnel.notify.events import QUESTION, Decided, NotifyEvent, TurnEnded, Waiting
from tunnel.notify.settings import NotifySettings
from tunnel.notify.vapid import origin_of
from tunnel.process.backoff import Backoff

logger = logging.getLogger("tunnel.notify")

NTFY_PREFIX = "ntfy+"
"""A `--notify` URL starting with this gets ntfy's plain-text form (docs/notifications.md)."""

EVENT_NAMES = {Waiting: "waiting", Decided: "decided", TurnEnded: "turn_ended"}
"""Each event's name in a webhook's body (`event`) and a command's `TUNNEL_EVENT`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookUrl:
    """A `--notify` URL: where to POST, and whether in ntfy's form."""

    url: str
    ntfy: bool


def parse_webhook_url(text: str) -> WebhookUrl:
    """`--notify URL` checked: http(s), or ntfy+http(s); ValueError (one line) otherwise."""
    ntfy = text.startswith(NTFY_PREFIX)
    url = text[len(NTFY_PREFIX) :] if ntfy else text
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("--notify: give an http(s) URL, or ntfy+https://SERVER/TOPIC for ntfy")
    return WebhookUrl(url=url, ntfy=ntfy)


def event_fields(
    event: NotifyEvent, *, host_id: str, conversation_id: str, details: bool
) -> dict[str, Any]:
    """What a webhook (and a command's environment) says of `event`."""
    fields: dict[str, Any] = {
        "v": 1,
        "event": EVENT_NAMES[type(event)],
        "host": host_id,
        "conversation": conversation_id,
        "time": int(time.time()),
    }
    if isinstance(event, Waiting):
        fields |= {"request_id": event.request_id, "kind": event.kind, "answer": list(event.answer)}
        if details:
            fields |= {"title": event.title, "command": event.command}
    elif isinstance(event, Decided):
        fields |= {"request_id": event.request_id, "outcome": event.outcome, "by": event.by}
        if event.kind:
            fields["kind"] = event.kind
        if event.option_kind:
            fields["option_kind"] = event.option_kind
    return fields


def ntfy_message(fields: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The plain-text body and the ntfy headers of an event; headers stay ASCII (the title and
    command, with details, go in the body)."""
    event = fields["event"]
    if event == "waiting" and fields["kind"] == QUESTION:
        text = "The agent asks a question and waits for an answer."
        if fields.get("title"):
            text += f"\n{fields['title']}"
        headers = {"Title": "agent-tunnel: question", "Tags": "question", "Priority": "high"}
    elif event == "waiting":
        text = f"A permission request ({fields['kind']}) waits for an answer."
        if fields.get("title"):
            text += f"\n{fields['title']}"
        if fields.get("command"):
            text += f"\n$ {fields['command']}"
        headers = {"Title": "agent-tunnel: approval needed", "Tags": "warning", "Priority": "high"}
    elif event == "decided":
        what = "question" if fields.get("kind") == QUESTION else "permission request"
        text = f"The {what} was {fields['outcome']}."
        headers = {"Title": "agent-tunnel: request closed", "Tags": "white_check_mark"}
    else:
        text = "The agent finished its turn."
        headers = {"Title": "agent-tunnel: turn ended", "Tags": "checkered_flag"}
    return text, headers


class WebhookSender:
    """POSTs each event to one URL, in order, in its own task; `run` it, then
    `notify_nowait`."""

    def __init__(
        self, url: str, settings: NotifySettings, *, conversation_id: str, host_id: str
    ) -> None:
        self._target = parse_webhook_url(url)
        self._settings = settings
        self._conversation_id = conversation_id
        self._host_id = host_id
        self._send: MemoryObjectSendStream[dict[str, Any]]
        self._receive: MemoryObjectReceiveStream[dict[str, Any]]
        self._send, self._receive = anyio.create_memory_object_stream[dict[str, Any]](
            settings.queue_size
        )
        self._failing = False
        self._full_said = False

    def notify_nowait(self, event: NotifyEvent, *, conversation_id: str | None = None) -> None:
        """Queue `event` of `conversation_id` (None: the one this sender was made for)."""
        fields = event_fields(
            event,
            host_id=self._host_id,
            conversation_id=conversation_id or self._conversation_id,
            details=self._settings.details,
        )
        try:
            self._send.send_nowait(fields)
        except anyio.WouldBlock:
            if not self._full_said:
                self._full_said = True
                logger.warning("webhook %s is behind; events dropped", self._origin)
            return
        self._full_said = False

    @property
    def _origin(self) -> str:
        return origin_of(self._target.url)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with httpx.AsyncClient(
            timeout=httpx.Timeout(self._settings.send_timeout), follow_redirects=False
        ) as client:
            task_status.started()
            async for fields in self._receive:
                await self._deliver(client, fields)

    async def _deliver(self, client: httpx.AsyncClient, fields: dict[str, Any]) -> None:
        if self._target.ntfy:
            text, headers = ntfy_message(fields)
            content = text.encode("utf-8")
            headers["Content-Type"] = "text/plain; charset=utf-8"
        else:
            content = json.dumps(fields, ensure_ascii=False).encode("utf-8")
            headers = {"Content-Type": "application/json"}
        backoff = Backoff()
        why = ""
        for attempt in range(self._settings.webhook_attempts):
            if attempt:
                await anyio.sleep(backoff.next_delay())
            status = None
            try:
                with anyio.move_on_after(self._settings.send_timeout):
                    # Only the status line counts: the answer's body is never read.
                    async with client.stream(
                        "POST", self._target.url, content=content, headers=headers
                    ) as response:
                        status = response.status_code
            except Exception as exc:  # a webhook never ends the session
                why = type(exc).__name__
                continue
            if status is None:
                why = "no answer in time"
                continue
            if 200 <= status < 300:
                if self._failing:
                    logger.warning("webhook %s works again", self._origin)
                self._failing = False
                return
            why = f"HTTP {status}"
            if 400 <= status < 500 and status not in (408, 429):
                break  # the request itself is refused: the same again would be too
        if not self._failing:
            self._failing = True
            logger.warning("webhook %s failed (%s); said once until it works", self._origin, why)
