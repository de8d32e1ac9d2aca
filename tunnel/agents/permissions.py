"""Permission requests shared by every driver and the host console, under the host's approval
policy (tunnel/policy, docs/policy.md) when it has one; without one the first answer wins.

With a policy, each request is decided by it before any human sees it: `allow` and `deny` are
answered at once with the agent's allow_once or reject_once option (the decision records the
rule), an answer remembered for the request's scope likewise; `ask` is offered to the people the
rule names, without the agent's "always" options unless the rule lets an answer be remembered,
and stays open until `approvals` distinct people allowed it (any one of them refusing refuses).
Each approval short of that is recorded as a `permission_approval` item.

An agent's request is registered first and then recorded as a `permission_request` item (status
`action_required`), so it can be answered the moment anyone sees it; any driver or the host may
answer. The answer is decided synchronously (no await between the check and the claim), so two
racing answers can never both win. The decision is recorded as a `permission_decision` item whose
`created_by` is who answered, with the chosen option's id, name and kind; a request that ends
without an answer (turn cancelled, agent gone) gets a decision with `outcome: "cancelled"`.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from tunnel.log import Item, StoreError
from tunnel.policy import Policy, Tally, ToolRequest, Verdict, Vote, decide
from tunnel.policy.memory import Key, Memory, Remembered, key_of
from tunnel.policy.tally import Refused, Role

from .errors import SessionError
from .recorder import Recorder, new_id
from .workspace import OutsideWorkspace, Workspace

logger = logging.getLogger("tunnel.agents.permissions")

MAX_OPEN_REQUESTS = 32
"""Open requests per session; an agent asking for more gets its extra requests cancelled."""

MAX_REMEMBERED = 1024
"""Closed request ids remembered to answer `already_answered` rather than `unknown_request`."""

RECORD_TIMEOUT = 5.0
"""How long closing a request may spend recording its decision while being cancelled."""

POLICY = "policy"
"""Who decided a request the approval policy answered (the decision's `created_by`)."""

PATH_KEYS = ("path", "file_path", "filePath", "absolute_path", "notebook_path", "dir_path")
"""Keys of a tool call's raw input that name a path it touches (besides its `locations`)."""

MAX_PATHS = 64
"""Paths of one request the policy looks at; a request naming more is asked about."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionOption:
    """One choice offered to the humans."""

    option_id: str
    """Identifier sent back by the driver that picks it."""
    name: str
    """Label shown on the button."""
    kind: str
    """allow_once, allow_always, reject_once or reject_always."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """How a permission request ended."""

    option: PermissionOption | None
    """The chosen option; None when the request was cancelled."""
    by: str
    """Who answered (or cancelled)."""

    @property
    def allowed(self) -> bool:
        return self.option is not None and self.option.kind.startswith("allow")


@dataclass(slots=True, kw_only=True)
class PendingPermission:
    """An open request: `PermissionBroker.wait()` it for the decision."""

    request_id: str
    options: dict[str, PermissionOption]
    data: dict[str, Any]
    """The `permission_request` item's data."""
    item: Item | None = None
    """The stored `permission_request` item; None while it is being stored."""
    answered: anyio.Event = field(default_factory=anyio.Event)
    decision: Decision | None = None
    tally: Tally | None = None
    """The votes so far, when the approval policy asked for this request."""
    key: Key | None = None
    """What an answer remembered from this request covers (tunnel.policy.memory)."""
    approval: Item | None = None
    """The latest stored `permission_approval` of this request, if any."""
    all_options: dict[str, PermissionOption] = field(default_factory=dict)
    """Every option the agent offered, the "always" ones the humans were not shown too."""


class PermissionBroker:
    """The open permission requests of one session."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._open: dict[str, PendingPermission] = {}
        self._closed: OrderedDict[str, None] = OrderedDict()
        self.policy: Policy | None = None
        """The host's approval policy; None: every request is asked, the first answer wins."""
        self.workspace: Workspace | None = None
        """Where the paths of a request are resolved for the policy."""
        self.agent_name: Callable[[], str] = lambda: ""
        """The agent's name (it may change as the agent introduces itself), as the policy's
        `agent` globs match it."""
        self._memory = Memory()

    def pending(self) -> list[Item]:
        """The `permission_request` items still waiting for an answer and, for one that needs
        more approvals, its latest `permission_approval` (what a joiner must see of it), in seq
        order."""
        items = [entry.item for entry in self._open.values() if entry.item is not None]
        items += [e.approval for e in self._open.values() if e.approval is not None]
        return sorted(items, key=lambda item: item.seq)

    def open_requests(self) -> list[dict[str, Any]]:
        """The data of every open request, oldest first, including one still being stored."""
        return [entry.data for entry in self._open.values()]

    async def open(
        self,
        *,
        title: str,
        tool_call_id: str | None,
        options: Sequence[PermissionOption],
        details: Mapping[str, Any] | None = None,
        judged: Mapping[str, Any] | None = None,
    ) -> PendingPermission | None:
        """Record a new request; None if too many are open already (the agent is told no).

        `details` go into the item's data beside the request's own fields (the tool call the
        agent asks about, its turn), as the agent sent them. The policy judges `judged` when
        given (the tool call as far as the session knows it), else `details`.
        """
        if len(self._open) >= MAX_OPEN_REQUESTS:
            await self._recorder.error(
                f"the agent asked for more than {MAX_OPEN_REQUESTS} permissions at once; "
                "the extra request was cancelled"
            )
            return None
        request_id = new_id("perm")
        offered = list(options)
        tally = None
        key = None
        early: Decision | None = None
        extra: dict[str, Any] = {}
        if self.policy is not None:
            request = await self._tool_request(judged or details or {})
            verdict = decide(self.policy, request)
            key = key_of(verdict, request)
            early, extra = self._decided_early(verdict, key, options)
            if early is None:
                tally = Tally(rule=verdict.rule)
                if verdict.rule.remember == "once":
                    offered = [o for o in options if not o.kind.endswith("_always")]
                extra = {"approval": _approval(verdict, tally)}
        data: dict[str, Any] = {
            **(details or {}),
            "request_id": request_id,
            "title": title,
            "tool_call_id": tool_call_id,
            "options": [
                {"option_id": o.option_id, "name": o.name, "kind": o.kind} for o in offered
            ],
            **extra,
        }
        entry = PendingPermission(
            request_id=request_id,
            options={o.option_id: o for o in offered},
            data=data,
            tally=tally,
            key=key,
            all_options={o.option_id: o for o in options},
        )
        if early is not None:
            # Decided before anyone could see it: recorded, request then decision, never open.
            entry.item = await self._recorder.permission_request(data)
            await self._close(entry, early, extra=extra)
            return entry
        # Open before it is stored: subscribers may see the item (and answer it) before the
        # append returns here.
        self._open[request_id] = entry
        try:
            entry.item = await self._recorder.permission_request(data)
        except BaseException:
            # Never stored, so nobody can have seen it: forget it without a decision.
            self._open.pop(request_id, None)
            raise
        return entry

    async def wait(self, entry: PendingPermission) -> Decision:
        """Wait for the first answer; if the waiter is cancelled, the request is closed too."""
        try:
            await entry.answered.wait()
        finally:
            if entry.decision is None:
                with anyio.move_on_after(RECORD_TIMEOUT, shield=True):
                    await self._close(entry, Decision(option=None, by="host"))
        assert entry.decision is not None
        return entry.decision

    async def answer(
        self,
        request_id: str,
        option_id: str,
        *,
        by: str,
        role: Role = "drive",
        verified: bool = False,
    ) -> None:
        """Answer for `by` (from the host console when `role` is `host`); raises SessionError
        unless this is the first valid answer, or under the policy one that counts (`forbidden`
        for someone the rule does not name, `already_answered` for a second approval)."""
        if not isinstance(request_id, str) or not isinstance(option_id, str):
            raise SessionError("unknown_request", "request_id and option_id must be strings")
        entry = self._open.get(request_id)
        if entry is None:
            if request_id in self._closed:
                raise SessionError("already_answered", "this permission request was answered")
            raise SessionError("unknown_request", "no such permission request")
        option = entry.options.get(option_id)
        if option is None:
            raise SessionError("unknown_request", "no such option for this permission request")
        if entry.tally is None:
            await self._close(entry, Decision(option=option, by=by))
            return
        vote = Vote(
            by=by,
            role=role,
            allow=option.kind.startswith("allow"),
            always=option.kind.endswith("_always"),
            verified=verified,
        )
        try:
            tally, outcome = entry.tally.add(vote)
        except Refused as exc:
            raise SessionError(exc.code, exc.message) from None
        # Counted before any await, like a first answer's claim.
        entry.tally = tally
        entry.data["approval"] = {**entry.data["approval"], "approved_by": list(tally.approved_by)}
        if outcome == "open":
            approval = await self._recorder.permission_approval(
                request_id=request_id,
                option_id=option.option_id,
                option_name=option.name,
                option_kind=option.kind,
                approved_by=list(tally.approved_by),
                needed=tally.needed,
                by=by,
            )
            if approval is not None and entry.decision is None:
                entry.approval = approval
            return
        extra: dict[str, Any] = {"approved_by": list(tally.approved_by)}
        chosen = option
        if option.kind.endswith("_always"):
            # The agent is told once; the host remembers, for no longer than the rule allows.
            once = _pick(entry.all_options.values(), option.kind[: -len("always")] + "once")
            chosen = once or option
        if tally.remember and entry.key is not None:
            scope = tally.rule.remember
            self._memory.remember(
                entry.key,
                Remembered(
                    allow=vote.allow,
                    scope=scope,
                    turn=self._recorder.turn,
                    by=tuple(v.by for v in tally.votes),
                ),
            )
            extra["remember"] = scope
        await self._close(entry, Decision(option=chosen, by=by), extra=extra)

    async def cancel(self, entry: PendingPermission, *, by: str) -> None:
        """Close one request as cancelled, if still open (the agent withdrew it)."""
        await self._close(entry, Decision(option=None, by=by))

    async def cancel_all(self, *, by: str) -> None:
        """Close every open request as cancelled (the turn was cancelled or the agent left)."""
        for entry in list(self._open.values()):
            await self._close(entry, Decision(option=None, by=by))

    async def _close(
        self,
        entry: PendingPermission,
        decision: Decision,
        *,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        if entry.decision is not None:
            return
        # Claim first, without awaiting: this is what makes the first answer win.
        entry.decision = decision
        self._open.pop(entry.request_id, None)
        self._closed[entry.request_id] = None
        while len(self._closed) > MAX_REMEMBERED:
            self._closed.popitem(last=False)
        try:
            option = decision.option
            await self._recorder.permission_decision(
                request_id=entry.request_id,
                option_id=option.option_id if option else "",
                option_name=option.name if option else "Cancelled",
                option_kind=option.kind if option else "",
                outcome="selected" if option else "cancelled",
                by=decision.by,
                extra=extra,
            )
        except StoreError as exc:
            # Only when the session is stopping (otherwise the writer holds it): the next
            # host closes the request as interrupted (tunnel.agents.recovery).
            logger.warning("the decision on %s was not stored: %s", entry.request_id, exc)
        finally:
            # The agent goes on even if the decision could not be stored.
            entry.answered.set()

    def _decided_early(
        self, verdict: Verdict, key: Key, options: Sequence[PermissionOption]
    ) -> tuple[Decision | None, dict[str, Any]]:
        """The decision the policy (or a remembered answer) makes without asking, and what the
        decision item records of why; (None, {}) when the humans are asked."""
        if verdict.verdict == "deny":
            # No reject option at all: the request is cancelled, which refuses it too.
            option = _pick(options, "reject_once") or _pick(options, "reject_always")
            return Decision(option=option, by=POLICY), {"policy": self._rule_record(verdict)}
        if verdict.verdict == "allow":
            option = _pick(options, "allow_once")
            if option is not None:
                return Decision(option=option, by=POLICY), {"policy": self._rule_record(verdict)}
            return None, {}  # only an "always" to give: never wider than once, so ask
        remembered = self._memory.recall(key, turn=self._recorder.turn)
        if remembered is not None:
            option = _pick(options, "allow_once" if remembered.allow else "reject_once")
            if option is not None:
                return Decision(option=option, by=remembered.by[-1]), {
                    "remembered": {"scope": remembered.scope, "by": list(remembered.by)},
                    "approved_by": list(remembered.by) if remembered.allow else [],
                }
        return None, {}

    def _rule_record(self, verdict: Verdict) -> dict[str, Any]:
        assert self.policy is not None
        return _rule_record(self.policy.source, verdict)

    async def _tool_request(self, details: Mapping[str, Any]) -> ToolRequest:
        """What the policy looks at of a request's tool call, its paths resolved in the
        workspace (in a worker thread: resolution reads the disk)."""
        call = details.get("tool_call")
        call = call if isinstance(call, Mapping) else {}
        raw = call.get("input")
        names: list[str] = []
        for location in call.get("locations") or []:
            if isinstance(location, Mapping) and isinstance(location.get("path"), str):
                names.append(location["path"])
        if isinstance(raw, Mapping):
            names += [raw[k] for k in PATH_KEYS if isinstance(raw.get(k), str) and raw[k]]
        names = list(dict.fromkeys(names))
        if len(names) > MAX_PATHS:
            paths: tuple[str | None, ...] = (None,)
        else:
            paths = tuple([await anyio.to_thread.run_sync(self._resolve, name) for name in names])
        kind = call.get("kind")
        return ToolRequest(
            kind=kind if isinstance(kind, str) else "other",
            paths=paths,
            command=_command(raw),
            agent=self.agent_name(),
        )

    def _resolve(self, path: str) -> str | None:
        """The path relative to the workspace, symlinks followed; None if it leaves it. Missing
        directories are taken as named below the deepest one that exists."""
        if self.workspace is None:
            return None
        missing: list[str] = []
        while True:
            try:
                found = self.workspace.resolve(path)
            except FileNotFoundError:
                head, name = os.path.split(path.rstrip("/"))
                if not name or name in (".", ".."):
                    return None
                missing.insert(0, name)
                path = head or "."
                continue
            except (OutsideWorkspace, OSError, ValueError):
                return None
            return "/".join([found, *missing]) if found != "." or not missing else "/".join(missing)


def _pick(options: Any, kind: str) -> PermissionOption | None:
    return next((o for o in options if o.kind == kind), None)


def _command(raw: Any) -> str | None:
    """The command line of an execute tool call's raw input, when it has one."""
    if not isinstance(raw, Mapping):
        return None
    command = raw.get("command", raw.get("cmd"))
    if isinstance(command, list) and all(isinstance(part, str) for part in command):
        command = " ".join(command)
    if not isinstance(command, str):
        return None
    args = raw.get("args")
    if isinstance(args, list) and all(isinstance(part, str) for part in args):
        command = " ".join([command, *args])
    return command


def _rule_record(source: str, verdict: Verdict) -> dict[str, Any]:
    """The rule a decision is recorded with: file, index, line and its text."""
    rule = verdict.rule
    record: dict[str, Any] = {"source": source, "index": rule.index, "rule": rule.text}
    if rule.line:
        record["line"] = rule.line
    if not verdict.matched:
        record["default"] = True
    return record


def _approval(verdict: Verdict, tally: Tally) -> dict[str, Any]:
    """What an asked request needs, for every teammate to see (`approval` of its data)."""
    rule = verdict.rule
    return {
        "answer": list(rule.answer),
        "approvals": rule.approvals,
        "approved_by": list(tally.approved_by),
        "remember": rule.remember,
        "rule": {"index": rule.index, "line": rule.line, "rule": rule.text}
        if verdict.matched
        else None,
    }
