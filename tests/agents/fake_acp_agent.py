"""A small ACP agent for the tests, run as `python fake_acp_agent.py` over stdio.

What it does depends on the prompt:
- `work`: thinks, plans, says hello, proposes a tool call and asks permission; if allowed it reads
  notes.txt, writes out.txt, then tries to write outside the workspace three ways (`..`, an
  absolute path, the symlink `escape`) and reports each refusal; if rejected it says so.
- `ask`: proposes an edit of notes.txt (kind, location, raw input, diff) and asks permission with
  the options Claude Code offers when leaving plan mode (bypass first); says `chose OPTION_ID`.
- `ask-big`: the same with a raw input and a diff far larger than one message.
- `become MODE`: switches to MODE by itself (reported as `current_mode_update`), says `became
  MODE`.
- `create PATH`: reads PATH (missing: it must get empty content) then writes it, as Gemini CLI's
  write_file does; says what it read.
- `tool`: a finished tool call whose id, `call_1`, is the same in every turn.
- `late`: ends its turn, then streams `late text` a moment later.
- `weird`: sends a session update of a kind no schema has, then says `after weird`.
- `unstable`: sends what the stable schema does not have: a markdown `plan_update`, a
  `plan_removed`, and `elicitation/complete` (URL-mode elicitation, which the host does not
  offer); says `after unstable`.
- `term`: runs a command in a terminal (output, exit code 3), waits, reads the output, releases.
- `term-outside`: asks for a terminal whose cwd is outside the workspace.
- `term-sleep`: starts a long command, then kills and releases it.
- `settings`: says its mode and model.
- `count N`: streams N numbered chunks as fast as it can.
- `wait`: streams until cancelled, then ends the turn with stop reason `cancelled`.
- `crash`: exits at once with code 3.
- `elicit`: asks a form question (`FORM`), if the client offers form elicitation; says
  `answered ACTION CONTENT` (the content as JSON).
- `elicit-bad`: asks with a nested object in the form; says the error it got.
- `elicit-withdraw` / `ask-withdraw`: asks a question / a permission, then withdraws it with
  `$/cancel_request` and says what the client answered.
- `usage`: reports its context use and cost (`usage_update`).
- `fallback`: moves itself to the model `smart`, as Claude Code does after a model fallback or
  its own `/model`, and reports its config options (`config_option_update`) twice, the same
  both times; says `now smart`.
- `title TEXT`: names its session TEXT (`session_info_update`, with `updatedAt`); says `titled`.
- `context ...`: says what came with the prompt besides its text: `embedded URI: FIRST LINE`,
  `resource_link URI` or `image MIME N bytes` per block.
- anything else: echoes it back (`/compact` too).

Environment: FAKE_ACP_STATE=DIR keeps sessions there and advertises loadSession (session/load
replays the history; with FAKE_ACP_REPLAY=after it answers first and replays after, bit by bit,
as Gemini CLI does); FAKE_ACP_RESUME=1 offers session/resume too (no replay); FAKE_ACP_FORK=1
offers the unstable session/fork (a new session with a copy of the kept one's history);
FAKE_ACP_LIST=1 offers session/list (the kept sessions, titled by their first prompt);
FAKE_ACP_JOURNAL=FILE appends a JSON line per session/new, load, resume, fork and prompt it
serves (with its pid; a prompt with its blocks); FAKE_ACP_AUTH=1
requires a login first (methods `fake-key`, which needs FAKE_ACP_KEY set, `browser`, which
always fails, and `password`, which always works: a person logged in), and the prompt `logout`
makes every later prompt answer auth_required until the next login;
FAKE_ACP_FLAVOR=config offers the model as a config option (as Claude Code does)
instead of the unstable `models` (as Gemini CLI does), FAKE_ACP_FLAVOR=config-mode the mode
too, instead of `modes` (as Codex does), and there a switch to the model `smart` moves it to the
mode `acceptEdits`; FAKE_ACP_LINKS=1 takes no embedded
context and no images in prompts (resource links only).
Sessions offer the modes `default`, `plan` and `acceptEdits` and advertise the commands `compact`
and `review`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import uuid
from typing import Any, cast

import acp
from acp import schema
from acp.agent.connection import AgentSideConnection
from acp.helpers import update_available_commands, update_current_mode
from acp.router import Route

STATE = os.environ.get("FAKE_ACP_STATE")
NEEDS_AUTH = os.environ.get("FAKE_ACP_AUTH") == "1"
FLAVOR = os.environ.get("FAKE_ACP_FLAVOR", "models")
REPLAY_AFTER = os.environ.get("FAKE_ACP_REPLAY") == "after"
RESUME = os.environ.get("FAKE_ACP_RESUME") == "1"
FORK = os.environ.get("FAKE_ACP_FORK") == "1"
JOURNAL = os.environ.get("FAKE_ACP_JOURNAL")
LIST = os.environ.get("FAKE_ACP_LIST") == "1"

MODES = schema.SessionModeState(
    current_mode_id="default",
    available_modes=[
        schema.SessionMode(id="default", name="Default", description="asks before edits"),
        schema.SessionMode(id="plan", name="Plan", description="plans only"),
        schema.SessionMode(id="acceptEdits", name="Accept edits", description="edits unasked"),
    ],
)
MODE_IDS = [m.id for m in MODES.available_modes]
MODELS = [("fast", "Fast model"), ("smart", "Smart model")]

FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "minLength": 1, "maxLength": 20},
        "color": {
            "type": "string",
            "title": "Color",
            "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}],
        },
        "count": {"type": "integer", "title": "How many", "minimum": 1, "maximum": 9},
        "urgent": {"type": "boolean", "title": "Urgent", "default": False},
    },
    "required": ["name", "color"],
}

EXIT_PLAN_OPTIONS = [
    schema.PermissionOption(
        option_id="bypassPermissions", name="Yes, and bypass permissions", kind="allow_always"
    ),
    schema.PermissionOption(
        option_id="acceptEdits", name="Yes, and auto-accept edits", kind="allow_always"
    ),
    schema.PermissionOption(
        option_id="default", name="Yes, and manually approve edits", kind="allow_once"
    ),
    schema.PermissionOption(option_id="plan", name="No, keep planning", kind="reject_once"),
]


class FakeAgent:
    def __init__(self) -> None:
        self.client: Any = None
        self.cwd = ""
        self.cancelled: dict[str, asyncio.Event] = {}
        self.history: dict[str, list[str]] = {}
        self.mode = "default"
        self.model = "fast"
        self.thinking = False
        self.authenticated = not NEEDS_AUTH
        self.resumed = False
        self.background: set[asyncio.Task[None]] = set()
        self.client_capabilities: Any = None

    def on_connect(self, conn: Any) -> None:
        self.client = conn

    # -- session life --------------------------------------------------------------------------

    async def initialize(self, protocol_version: int, **kwargs: Any) -> schema.InitializeResponse:
        self.client_capabilities = kwargs.get("client_capabilities")
        methods: list[Any] = []
        if NEEDS_AUTH:
            methods = [
                schema.EnvVarAuthMethod(
                    type="env_var",
                    id="fake-key",
                    name="Fake key",
                    description="FAKE_ACP_KEY set",
                    vars=[schema.AuthEnvVar(name="FAKE_ACP_KEY")],
                ),
                schema.AuthMethodAgent(id="browser", name="Browser login"),
                schema.AuthMethodAgent(
                    id="password", name="Password", description="as a person types it"
                ),
            ]
        return schema.InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_info=schema.Implementation(name="fake-agent", version="1.0"),
            agent_capabilities=schema.AgentCapabilities(
                load_session=STATE is not None,
                prompt_capabilities=schema.PromptCapabilities(
                    embedded_context=os.environ.get("FAKE_ACP_LINKS") != "1",
                    image=os.environ.get("FAKE_ACP_LINKS") != "1",
                ),
                session_capabilities=schema.SessionCapabilities(
                    resume=schema.SessionResumeCapabilities() if RESUME else None,
                    fork=schema.SessionForkCapabilities() if FORK else None,
                    list=schema.SessionListCapabilities() if LIST else None,
                ),
            ),
            auth_methods=methods,
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        if method_id == "password" or (method_id == "fake-key" and os.environ.get("FAKE_ACP_KEY")):
            self.authenticated = True
            return
        raise acp.RequestError(-32603, "no browser here", {"hint": "use fake-key"})

    def _session_result(self, session_id: str | None) -> dict[str, Any]:
        modes = MODES.model_copy(update={"current_mode_id": self.mode})
        result: dict[str, Any] = {}
        if FLAVOR != "config-mode":
            result["modes"] = modes.model_dump(mode="json", by_alias=True)
        choices = [{"modelId": m, "name": n} for m, n in MODELS]
        if FLAVOR in ("config", "config-mode"):
            result["configOptions"] = self._config_options()
        else:
            result["models"] = {"currentModelId": self.model, "availableModels": choices}
        if session_id is not None:
            result["sessionId"] = session_id
        return result

    def _config_options(self) -> list[dict[str, Any]]:
        mode: list[dict[str, Any]] = []
        if FLAVOR == "config-mode":
            mode.append(
                {
                    "id": "mode",
                    "name": "Mode",
                    "category": "mode",
                    "type": "select",
                    "currentValue": self.mode,
                    "options": [{"value": m.id, "name": m.name} for m in MODES.available_modes],
                }
            )
        return [
            *mode,
            {
                "id": "model",
                "name": "Model",
                "category": "model",
                "type": "select",
                "currentValue": self.model,
                "options": [{"value": m, "name": n} for m, n in MODELS],
            },
            {
                "id": "thinking",
                "name": "Think hard",
                "type": "boolean",
                "currentValue": self.thinking,
            },
        ]

    async def new_session(self, cwd: str, **kwargs: Any) -> dict[str, Any]:
        if not self.authenticated:
            raise acp.RequestError.auth_required({"reason": "log in first"})
        self.cwd = cwd
        session_id = f"s-{uuid.uuid4().hex[:12]}"
        self.history[session_id] = []
        _journal("session/new", sessionId=session_id)
        self._soon(self._advertise(session_id))
        # A plain map: the unstable `models` is not in the package's schema.
        return self._session_result(session_id)

    async def list_sessions(self, cwd: str | None = None, **kwargs: Any) -> dict[str, Any]:
        _journal("session/list", cwd=cwd)
        sessions = []
        for name in sorted(os.listdir(STATE)) if STATE else ():
            with open(os.path.join(STATE, name)) as file:
                history = json.load(file)
            sessions.append(
                {
                    "sessionId": name.removesuffix(".json"),
                    "cwd": cwd or "/",
                    "title": history[0] if history else None,
                    "updatedAt": "2026-01-02T03:04:05Z",
                }
            )
        return {"sessions": sessions}

    async def fork_session(self, cwd: str, session_id: str, **kwargs: Any) -> dict[str, Any]:
        self._restore(cwd, session_id)
        forked = f"s-{uuid.uuid4().hex[:12]}"
        self.history[forked] = list(self.history[session_id])
        if (path := self._state_file(forked)) is not None:
            with open(path, "w") as file:
                json.dump(self.history[forked], file)
        _journal("session/fork", sessionId=session_id, forked=forked)
        self._soon(self._advertise(forked))
        return self._session_result(forked)

    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> dict[str, Any]:
        _journal("session/load", sessionId=session_id)
        self._restore(cwd, session_id)
        if REPLAY_AFTER:
            self._soon(self._replay(session_id, pause=0.02))
        else:
            await self._replay(session_id)
        self._soon(self._advertise(session_id))
        return self._session_result(None)

    async def resume_session(self, cwd: str, session_id: str, **kwargs: Any) -> dict[str, Any]:
        _journal("session/resume", sessionId=session_id)
        self._restore(cwd, session_id)
        self.resumed = True
        self._soon(self._advertise(session_id))
        return self._session_result(None)

    def _restore(self, cwd: str, session_id: str) -> None:
        path = self._state_file(session_id)
        if path is None or not os.path.exists(path):
            raise acp.RequestError.resource_not_found(session_id)
        self.cwd = cwd
        with open(path) as file:
            self.history[session_id] = json.load(file)

    async def _replay(self, session_id: str, pause: float = 0.0) -> None:
        for n, text in enumerate(self.history[session_id]):
            await self.client.session_update(session_id, acp.update_user_message_text(text))
            await self.client.session_update(
                session_id, acp.start_tool_call(f"old_{n}", "An old tool call", status="completed")
            )
            await asyncio.sleep(pause)
            await self._say(session_id, f"echo: {text}")
        await self.client.session_update(session_id, update_current_mode(self.mode))

    def _state_file(self, session_id: str) -> str | None:
        return os.path.join(STATE, f"{session_id}.json") if STATE else None

    def _remember(self, session_id: str, text: str) -> None:
        self.history.setdefault(session_id, []).append(text)
        if (path := self._state_file(session_id)) is not None:
            with open(path, "w") as file:
                json.dump(self.history[session_id], file)

    async def _advertise(self, session_id: str) -> None:
        await asyncio.sleep(0.01)  # after the response, as real agents do
        await self.client.session_update(
            session_id,
            update_available_commands(
                [
                    schema.AvailableCommand(name="compact", description="Compact the context"),
                    schema.AvailableCommand(
                        name="review",
                        description="Review a change",
                        input=schema.AvailableCommandInput(
                            root=schema.UnstructuredCommandInput(hint="what to review")
                        ),
                    ),
                ]
            ),
        )

    def _soon(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    # -- modes, models, config -----------------------------------------------------------------

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> None:
        if mode_id not in ("default", "plan", "acceptEdits"):
            raise acp.RequestError.invalid_params({"modeId": mode_id})
        self.mode = mode_id
        await self.client.session_update(session_id, update_current_mode(mode_id))

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> dict[str, Any]:
        if config_id == "model" and value in dict(MODELS):
            self.model = str(value)
            if FLAVOR == "config-mode" and value == "smart":
                self.mode = "acceptEdits"
        elif config_id == "mode" and FLAVOR == "config-mode" and value in MODE_IDS:
            self.mode = str(value)
        elif config_id == "thinking" and isinstance(value, bool):
            self.thinking = value
        else:
            raise acp.RequestError.invalid_params({"configId": config_id})
        return {"configOptions": self._config_options()}

    async def set_model(self, params: Any) -> dict[str, Any]:
        """session/set_model, unstable: not in the package's schema, so served raw."""
        model_id = params.get("modelId") if isinstance(params, dict) else None
        if model_id not in dict(MODELS):
            raise acp.RequestError.invalid_params({"modelId": model_id})
        self.model = str(model_id)
        return {}

    # -- turns ---------------------------------------------------------------------------------

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.setdefault(session_id, asyncio.Event()).set()

    async def prompt(
        self, session_id: str, prompt: list[Any], **kwargs: Any
    ) -> schema.PromptResponse:
        text = "".join(getattr(block, "text", "") for block in prompt).strip()
        if JOURNAL:
            blocks = [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in prompt]
            _journal("session/prompt", sessionId=session_id, blocks=blocks)
        if not self.authenticated:
            raise acp.RequestError.auth_required({"reason": "logged out"})
        if text == "logout":
            self.authenticated = False
            await self.client.session_update(session_id, acp.update_agent_message_text("bye"))
            return schema.PromptResponse(stop_reason="end_turn")
        self.cancelled[session_id] = asyncio.Event()
        self._remember(session_id, text)
        word, _, rest = text.partition(" ")
        if text == "crash":
            os._exit(3)
        if text == "work":
            await self._work(session_id)
        elif text in ("ask", "ask-big"):
            await self._ask(session_id, big=text == "ask-big")
        elif word == "create":
            await self._create(session_id, rest)
        elif word == "become":
            # Its own switch, as Claude's leaving plan mode for the mode a person picked.
            self.mode = rest
            await self.client.session_update(session_id, update_current_mode(rest))
            await self._say(session_id, f"became {rest}")
        elif text == "tool":
            await self.client.session_update(
                session_id, acp.start_tool_call("call_1", "Same id", status="completed")
            )
        elif text == "bare-ask":
            await self._bare_ask(session_id)
        elif text == "late":
            await self._say(session_id, "on time")
            self._soon(self._late(session_id))
        elif text == "unstable":
            conn = self.client._conn
            plan = {"type": "markdown", "planId": "p1", "content": "# Steps"}
            for update in (
                {"sessionUpdate": "plan_update", "plan": plan},
                {"sessionUpdate": "plan_removed", "planId": "p1"},
            ):
                await conn.send_notification(
                    "session/update", {"sessionId": session_id, "update": update}
                )
            await conn.send_notification("elicitation/complete", {"elicitationId": "e1"})
            await self._say(session_id, "after unstable")
        elif text == "weird":
            await self.client._conn.send_notification(
                "session/update",
                {"sessionId": session_id, "update": {"sessionUpdate": "future_thing", "x": 1}},
            )
            # A vendor's own notification, as Qwen Code sends its prompt suggestions.
            await self.client._conn.send_notification(
                "vendor/notify/session/suggestion", {"sessionId": session_id, "text": "next?"}
            )
            await self._say(session_id, "after weird")
        elif text == "term":
            await self._terminal(session_id)
        elif text == "term-outside":
            try:
                await self.client.create_terminal(
                    session_id=session_id, command="true", cwd=os.path.dirname(self.cwd)
                )
            except acp.RequestError as exc:
                await self._say(session_id, f"refused: {exc}")
        elif text == "term-sleep":
            await self._terminal_killed(session_id)
        elif text in ("elicit", "elicit-bad", "elicit-withdraw", "ask-withdraw"):
            await self._elicit(session_id, text)
        elif word == "context":
            said = []
            for block in prompt[1:]:
                if isinstance(block, schema.EmbeddedResourceContentBlock):
                    first = getattr(block.resource, "text", "").splitlines()[:1]
                    said.append(f"embedded {block.resource.uri}: {''.join(first)}")
                elif isinstance(block, schema.ImageContentBlock):
                    size = len(base64.b64decode(block.data))
                    said.append(f"image {block.mime_type} {size} bytes")
                else:
                    said.append(f"{block.type} {getattr(block, 'uri', '')}")
            await self._say(session_id, "; ".join(said) or "nothing attached")
        elif text == "usage":
            await self.client._conn.send_notification(
                "session/update",
                {
                    "sessionId": session_id,
                    "update": {
                        "sessionUpdate": "usage_update",
                        "used": 53000,
                        "size": 200000,
                        "cost": {"amount": 0.42, "currency": "USD"},
                    },
                },
            )
            await self._say(session_id, "used some")
        elif text == "fallback":
            self.model = "smart"
            for _ in range(2):
                await self.client._conn.send_notification(
                    "session/update",
                    {
                        "sessionId": session_id,
                        "update": {
                            "sessionUpdate": "config_option_update",
                            "configOptions": self._config_options(),
                        },
                    },
                )
            await self._say(session_id, "now smart")
        elif word == "title":
            await self.client._conn.send_notification(
                "session/update",
                {
                    "sessionId": session_id,
                    "update": {
                        "sessionUpdate": "session_info_update",
                        "title": rest,
                        "updatedAt": "2026-01-02T03:04:05Z",
                    },
                },
            )
            await self._say(session_id, "titled")
        elif text == "settings":
            await self._say(session_id, f"mode {self.mode} model {self.model}")
        elif text == "remember":
            how = " (resumed)" if self.resumed else ""
            await self._say(
                session_id, f"I remember {len(self.history[session_id]) - 1} prompts{how}"
            )
        elif word == "count":
            for i in range(int(rest)):
                await self._say(session_id, f"{i},")
        elif text == "wait":
            for _ in range(2000):  # 20 s at most
                await self._say(session_id, ".")
                try:
                    await asyncio.wait_for(self.cancelled[session_id].wait(), 0.01)
                except TimeoutError:
                    continue
                return schema.PromptResponse(stop_reason="cancelled")
        else:
            await self._say(session_id, f"echo: {text}")
        return schema.PromptResponse(stop_reason="end_turn")

    async def _say(self, session_id: str, text: str) -> None:
        await self.client.session_update(session_id, acp.update_agent_message_text(text))

    async def _late(self, session_id: str) -> None:
        await asyncio.sleep(0.2)
        await self._say(session_id, "late ")
        await self._say(session_id, "text")

    async def _think(self, session_id: str, text: str) -> None:
        await self.client.session_update(session_id, acp.update_agent_thought_text(text))

    async def _plan(self, session_id: str, done: int) -> None:
        entries = [
            acp.plan_entry(step, status="completed" if i < done else "pending")
            for i, step in enumerate(("read notes", "write out"))
        ]
        await self.client.session_update(session_id, acp.update_plan(entries))

    async def _bare_ask(self, sid: str) -> None:
        # A command shown whole in its tool call, then asked about with its fields empty, as
        # Claude's adapter asks to leave plan mode.
        await self.client.session_update(
            sid,
            acp.start_tool_call(
                "call_bare", "Run a command", kind="execute", raw_input={"command": "rm -rf build"}
            ),
        )
        answer = await self.client.request_permission(
            session_id=sid,
            tool_call=schema.ToolCallUpdate(
                tool_call_id="call_bare", kind="execute", raw_input={}, content=[]
            ),
            options=[
                schema.PermissionOption(option_id="yes", name="Yes", kind="allow_once"),
                schema.PermissionOption(option_id="no", name="No", kind="reject_once"),
            ],
        )
        outcome = answer.outcome
        await self._say(sid, f"chose {outcome.option_id if outcome.outcome == 'selected' else ''}")

    async def _ask(self, sid: str, *, big: bool) -> None:
        notes = os.path.join(self.cwd, "notes.txt")
        old, new = ("milk\n" * 40_000, "bread\n" * 40_000) if big else ("milk\n", "bread\n")
        raw = {"file_path": notes, "old_string": old.strip(), "new_string": new.strip()}
        if big:
            raw["blob"] = "x" * 300_000
        answer = await self.client.request_permission(
            session_id=sid,
            tool_call=schema.ToolCallUpdate(
                tool_call_id="call_ask",
                title="Edit notes.txt",
                kind="edit",
                status="pending",
                locations=[schema.ToolCallLocation(path=notes, line=1)],
                raw_input=raw,
                content=[acp.tool_diff_content(notes, new, old)],
            ),
            options=EXIT_PLAN_OPTIONS,
        )
        outcome = answer.outcome
        chosen = outcome.option_id if outcome.outcome == "selected" else "cancelled"
        await self._say(sid, f"chose {chosen}")

    async def _elicit(self, sid: str, text: str) -> None:
        elicitation = getattr(self.client_capabilities, "elicitation", None)
        if elicitation is None or elicitation.form is None:
            await self._say(sid, "no elicitation")
            return
        conn = self.client._conn
        form: dict[str, Any] = FORM
        if text == "elicit-bad":
            form = {"type": "object", "properties": {"deep": {"type": "object"}}}
        if text == "ask-withdraw":
            method = "session/request_permission"
            params: dict[str, Any] = {
                "sessionId": sid,
                "toolCall": {"toolCallId": "call_w", "title": "Withdrawn"},
                "options": [{"optionId": "yes", "name": "Yes", "kind": "allow_once"}],
            }
        else:
            method = "elicitation/create"
            params = {"sessionId": sid, "mode": "form", "message": "Pick", "requestedSchema": form}
        request_id = conn._next_request_id
        asked = asyncio.ensure_future(conn.send_request(method, params))
        if text.endswith("-withdraw"):
            await asyncio.sleep(0.3)
            await conn.send_notification("$/cancel_request", {"requestId": request_id})
        try:
            answer = await asked
        except acp.RequestError as exc:
            await self._say(sid, f"error {exc}")
            return
        if text == "ask-withdraw":
            await self._say(sid, f"answered {answer['outcome']['outcome']}")
            return
        content = json.dumps(answer.get("content"), sort_keys=True)
        await self._say(sid, f"answered {answer['action']} {content}")

    async def _create(self, sid: str, path: str) -> None:
        full = os.path.join(self.cwd, path)
        try:
            read = await self.client.read_text_file(session_id=sid, path=full)
        except acp.RequestError as exc:
            # What Gemini CLI gets: it cannot create the file.
            await self._say(sid, f"Error checking existing file: {exc}")
            return
        await self.client.write_text_file(session_id=sid, path=full, content="created\n")
        await self._say(sid, f"read {read.content!r} then wrote {path}")

    async def _terminal(self, sid: str) -> None:
        script = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
        created = await self.client.create_terminal(
            session_id=sid, command=sys.executable, args=["-c", script], output_byte_limit=1000
        )
        terminal_id = created.terminal_id
        await self.client.session_update(
            sid,
            acp.start_tool_call(
                "call_term",
                "Run a script",
                kind="execute",
                content=[acp.tool_terminal_ref(terminal_id)],
            ),
        )
        exited = await self.client.wait_for_terminal_exit(session_id=sid, terminal_id=terminal_id)
        output = await self.client.terminal_output(session_id=sid, terminal_id=terminal_id)
        await self.client.release_terminal(session_id=sid, terminal_id=terminal_id)
        try:
            await self.client.terminal_output(session_id=sid, terminal_id=terminal_id)
        except acp.RequestError:
            released = "gone"
        else:
            released = "still there"
        lines = sorted(output.output.split())
        await self._say(
            sid, f"exit {exited.exit_code} output {' '.join(lines)} after release {released}"
        )

    async def _terminal_killed(self, sid: str) -> None:
        created = await self.client.create_terminal(
            session_id=sid, command=sys.executable, args=["-c", "import time; time.sleep(60)"]
        )
        await self.client.kill_terminal(session_id=sid, terminal_id=created.terminal_id)
        exited = await self.client.wait_for_terminal_exit(
            session_id=sid, terminal_id=created.terminal_id
        )
        await self.client.release_terminal(session_id=sid, terminal_id=created.terminal_id)
        await self._say(sid, f"killed by {exited.signal}")

    async def _work(self, sid: str) -> None:
        await self._think(sid, "Let me ")
        await self._think(sid, "think.")
        await self._plan(sid, 0)
        await self._say(sid, "Hello ")
        await self._say(sid, "there.")
        notes = os.path.join(self.cwd, "notes.txt")
        await self.client.session_update(
            sid,
            acp.start_read_tool_call("call_1", "Read notes.txt", notes),
        )
        answer = await self.client.request_permission(
            session_id=sid,
            tool_call=schema.ToolCallUpdate(tool_call_id="call_1", title="Read notes.txt"),
            options=[
                schema.PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
                schema.PermissionOption(option_id="no", name="Reject", kind="reject_once"),
            ],
        )
        outcome = answer.outcome
        if outcome.outcome != "selected" or outcome.option_id != "yes":
            await self.client.session_update(sid, acp.update_tool_call("call_1", status="failed"))
            await self._say(sid, f"Not allowed ({outcome.outcome}).")
            return
        read = await self.client.read_text_file(session_id=sid, path=notes)
        await self.client.session_update(
            sid,
            acp.update_tool_call(
                "call_1",
                status="completed",
                content=[acp.tool_content(acp.text_block(read.content))],
            ),
        )
        await self.client.write_text_file(
            session_id=sid, path=os.path.join(self.cwd, "out.txt"), content=read.content.upper()
        )
        outside = os.path.dirname(self.cwd)
        for path in (
            os.path.join(self.cwd, "..", "escape-dotdot.txt"),
            os.path.join(outside, "escape-absolute.txt"),
            os.path.join(self.cwd, "escape", "escape-symlink.txt"),
        ):
            try:
                await self.client.write_text_file(session_id=sid, path=path, content="pwned")
            except acp.RequestError as exc:
                await self._say(sid, f"refused: {exc}\n")
            else:
                await self._say(sid, f"WROTE {path}\n")
        await self._plan(sid, 2)
        await self._say(sid, "Done.")


def _journal(method: str, **details: Any) -> None:
    """One line in FAKE_ACP_JOURNAL, written at once (several agents may share the file)."""
    if JOURNAL:
        line = json.dumps({"method": method, "pid": os.getpid(), **details}) + "\n"
        fd = os.open(JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


async def main() -> None:
    agent = FakeAgent()
    output, input_ = await acp.stdio_streams(limit=50 * 1024 * 1024)
    conn = AgentSideConnection(
        cast(acp.Agent, agent),
        input_,
        output,
        listening=False,
        use_unstable_protocol=RESUME or FORK,
    )
    # session/set_model is unstable: the package routes no such method, so add it.
    conn._conn._handler.add_route(
        Route(method="session/set_model", func=agent.set_model, kind="request")
    )
    await conn.listen()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
