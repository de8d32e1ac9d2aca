"""The shared agent session: what every surface (browser, `tunnel attach`, host console) drives.

One `AgentSession` exists per hosted conversation. Drivers and the host console call it; viewers
only read the log it writes. Requests that are refused raise `SessionError` (`.errors`) with one
of the error codes of docs/application.md, and nothing is recorded for them.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc

from tunnel.app.requests import PromptImage
from tunnel.log import Item

from .errors import SessionError, check_by
from .permissions import PermissionBroker
from .recorder import Recorder
from .sandbox import HiddenFiles

if TYPE_CHECKING:
    from tunnel.policy import Policy
    from tunnel.policy.tally import Role

    from .sandbox import Sandbox
    from .workspace import Workspace

AgentKind = Literal["chat", "terminal"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentInfo:
    """What a teammate learns about the agent in the channel's `ready` message."""

    name: str
    """Display name: `demo`, or the command's program name for acp/pty agents."""
    kind: AgentKind
    """`chat` (items are messages, tool calls, permissions) or `terminal` (raw terminal output)."""


class AgentSession(abc.ABC):
    """One shared agent session; every driver and the host console use the same instance.

    `run()` owns the agent (subprocess, pseudo-terminal, ...) and must be running, inside the
    host's task group, for requests to be served. The log is the only record of the conversation:
    the session keeps nothing but in-flight state (queued prompts, open permission requests).
    """

    info: AgentInfo
    conversation_id: str
    sandbox: Sandbox | None = None
    """The sandbox the agent's process runs in (`tunnel host --sandbox`); None: it runs with the
    host user's rights. `create_session` sets it before `run()`."""

    def __init__(
        self,
        *,
        info: AgentInfo,
        conversation_id: str,
        recorder: Recorder,
        permissions: PermissionBroker,
    ) -> None:
        self.info = info
        self.conversation_id = conversation_id
        self._recorder = recorder
        self._permissions = permissions
        self._hidden = HiddenFiles()

    @abc.abstractmethod
    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Start the agent, report started, serve requests until cancelled, then clean up."""

    @abc.abstractmethod
    async def prompt(self, text: str, *, by: str, images: Sequence[PromptImage] = ()) -> None:
        """Record `text` as a user `message` from `by` at once, then hand it to the agent, with
        `images` if it takes images (`SessionError("not_supported")` otherwise)."""

    @abc.abstractmethod
    async def cancel(self, *, by: str) -> None:
        """Stop what the agent is doing now (a no-op when it is idle)."""

    async def answer_permission(
        self,
        request_id: str,
        option_id: str,
        *,
        by: str,
        role: Role = "drive",
        verified: bool = False,
    ) -> None:
        """Answer an open permission request; the first answer wins, or under the host's
        approval policy the answers its rule asks for (`role`: `host` from the host console;
        `verified`: `by` is the invited name of a personal link, not a typed one).

        Raises `SessionError("already_answered")` for a request someone already answered (or
        this person already approved), `SessionError("forbidden")` for someone the policy's rule
        does not let answer, and `SessionError("unknown_request")` for an unknown request or
        option.
        """
        check_by(by)
        # The answer would run the tool with no decision in the log: wait until it can be written.
        self._recorder.writer.check_writable()
        await self._permissions.answer(request_id, option_id, by=by, role=role, verified=verified)

    async def answer_elicitation(
        self, request_id: str, action: str, content: dict[str, Any] | None, *, by: str
    ) -> None:
        """Answer an open question of the agent's (`elicitation_request`): `accept` with
        `content` that fits its fields, `decline` or `cancel`; the first answer wins.

        Raises `SessionError` with `already_answered`, `unknown_request`, or `bad_request` for
        content that does not fit the question (tunnel.agents.elicitation)."""
        raise SessionError("unknown_request", "no such question")

    def pending_elicitations(self) -> list[Item]:
        """The `elicitation_request` items still waiting for an answer, oldest first."""
        return []

    async def list_paths(self, prefix: str) -> tuple[list[str], bool]:
        """The workspace paths that complete `prefix` (an `@path` being typed in a prompt), and
        whether there were more; none for a session whose agent reads no files of a prompt."""
        return [], False

    def set_hidden(self, hidden: HiddenFiles) -> None:
        """Never hand the agent one of the host's `hidden` files from the workspace (`@path`,
        its file reads), as teammates are never shown one; before `run()`."""
        self._hidden = hidden

    def set_policy(self, policy: Policy | None, *, workspace: Workspace | None) -> None:
        """Decide this session's permission requests by `policy` (docs/policy.md), its paths
        resolved in `workspace`; before `run()`."""
        self._permissions.policy = policy
        self._permissions.workspace = workspace
        self._permissions.agent_name = lambda: self.info.name

    async def set_mode(self, mode_id: str, *, by: str) -> None:
        """Switch the agent's session mode; recorded with who asked (ACP agents)."""
        raise SessionError("not_supported", f"{self.info.name} has no modes to switch")

    async def set_model(self, model_id: str, *, by: str) -> None:
        """Switch the agent's model; recorded with who asked (ACP agents)."""
        raise SessionError("not_supported", f"{self.info.name} has no models to switch")

    async def set_config(self, config_id: str, value: str | bool, *, by: str) -> None:
        """Set one of the agent's session config options; recorded with who asked (ACP agents)."""
        raise SessionError("not_supported", f"{self.info.name} has no config options")

    async def authenticate(self, method_id: str, *, by: str) -> None:
        """Log the agent in with `method_id`, one of the login methods it offers; the outcome
        is recorded with who asked (ACP agents; docs/agents.md, "Logging in")."""
        raise SessionError("not_supported", f"{self.info.name} has no login to give")

    def settings(self) -> dict[str, Any]:
        """The agent's current modes, models and config options, as the latest `settings`
        session event has them; empty when it offers none."""
        return {}

    def commands(self) -> list[dict[str, Any]]:
        """The agent's latest advertised slash commands (`name`, `description`, `hint`)."""
        return []

    async def input(self, data: bytes, *, by: str) -> None:
        """Type `data` into the agent's terminal (terminal agents only)."""
        raise SessionError("not_supported", f"{self.info.name} is a chat agent: it has no terminal")

    async def resize(self, cols: int, rows: int, *, by: str) -> None:
        """Resize the agent's terminal (terminal agents only)."""
        raise SessionError("not_supported", f"{self.info.name} is a chat agent: it has no terminal")

    def status(self) -> dict[str, Any] | None:
        """The data of a `status` event as it stands now (docs/application.md, "Events"), for a
        teammate who joins between two of them; None for a session without turns."""
        return None

    def terminal_size(self) -> tuple[int, int] | None:
        """The agent's terminal as (columns, rows), what its program draws for; None for a chat
        agent."""
        return None

    def storage(self) -> dict[str, Any] | None:
        """The data of a `storage` event while the log cannot be written (docs/agents.md, "When
        the log cannot be written"); None while it can."""
        return self._recorder.writer.state()

    def pending_permissions(self) -> list[Item]:
        """The `permission_request` items still waiting for an answer (and the latest
        `permission_approval` of one that needs more approvals), oldest first."""
        return self._permissions.pending()

    def open_permissions(self) -> list[dict[str, Any]]:
        """The data of every open permission request, oldest first: answerable from the moment
        the request exists, even while its item is being stored."""
        return self._permissions.open_requests()
