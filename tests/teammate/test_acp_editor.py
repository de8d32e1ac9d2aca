"""`tunnel acp LINK` driven by an editor that is not ours: the ACP TypeScript SDK's client app
(tests/teammate/acp_editor.mjs) runs it over stdio against a real relay and a real `tunnel host`
sharing the fake ACP agent, beside a Python teammate (about 50 s in all, most of it starting
hosts: one host serves the tests that leave it as it is).

The SDK is the one scripts/test installs with the real agents (TUNNEL_TEST_AGENTS_BIN), so this
is part of the required `agents_real` suite: under TUNNEL_REQUIRE_ALL=1 it fails without it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.agents.fake_acp_agent import FORM
from tests.host.host_process import HostProcess
from tests.host.teammate import Teammate, attached
from tests.support import RelayProcess, wait_online, wait_or_kill
from tunnel.agents.elicitation import form_fields
from tunnel.app.requests import Cancel, ElicitationAnswer, PermissionAnswer, Prompt
from tunnel.e2e.crypto import ShareLink
from tunnel.e2e.identity import HostIdentity
from tunnel.teammate.client import TeammateSession

ROOT = Path(__file__).resolve().parents[2]
EDITOR = ROOT / "tests" / "teammate" / "acp_editor.mjs"
ELICITS = {"elicitation": {"form": {}}}
"""The client capabilities of an editor that answers the agent's questions."""
FAKE_ACP_AGENT = ROOT / "tests" / "agents" / "fake_acp_agent.py"
TUNNEL = [sys.executable, "-m", "tunnel.cli"]

Line = dict[str, Any]


def acp_sdk() -> Path:
    """The ACP TypeScript SDK beside the real agents; skips (fails under TUNNEL_REQUIRE_ALL=1)
    when it or node is missing."""
    named = os.environ.get("TUNNEL_TEST_AGENTS_BIN")
    sdk = Path(named).parent / "@agentclientprotocol" / "sdk" if named else None
    problem = None
    if sdk is None or not (sdk / "dist" / "v1" / "stable" / "acp.js").exists():
        problem = f"the ACP TypeScript SDK is not installed (at {sdk}): run ./scripts/test"
    elif shutil.which("node") is None:
        problem = "node is not installed"
    if problem is not None:
        if os.environ.get("TUNNEL_REQUIRE_ALL") == "1":
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    assert sdk is not None
    return sdk


class Editor:
    """The SDK's client app running `tunnel acp`: commands in, JSON lines out."""

    def __init__(self, sdk: Path, link: str, name: str) -> None:
        env = dict(
            os.environ,
            ACP_SDK=str(sdk),
            ACP_COMMAND=json.dumps([*TUNNEL, "acp", "--name", name]),
            TUNNEL_LINK=link,
            PYTHONUNBUFFERED="1",
        )
        self.proc = subprocess.Popen(
            ["node", str(EDITOR)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.lines: list[Line] = []
        self._changed = threading.Condition()
        self._next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            with self._changed:
                self.lines.append(json.loads(raw))
                self._changed.notify_all()

    def do(self, what: str, **fields: Any) -> int:
        """Send one command; return its id."""
        self._next_id += 1
        assert self.proc.stdin is not None
        command = {"id": self._next_id, "do": what, **fields}
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")
        self.proc.stdin.flush()
        return self._next_id

    def _wait(self, predicate: Callable[[Line], bool], start: int, within: float) -> Line:
        with self._changed:
            index = start
            ok = self._changed.wait_for(
                lambda: any(predicate(line) for line in self.lines[index:]), within
            )
            if not ok:
                tail = "\n".join(json.dumps(line) for line in self.lines[-30:])
                raise AssertionError(f"the editor never printed the line awaited; last:\n{tail}")
            return next(line for line in self.lines[index:] if predicate(line))

    async def wait(
        self, predicate: Callable[[Line], bool], *, start: int = 0, within: float = 30.0
    ) -> Line:
        return await anyio.to_thread.run_sync(self._wait, predicate, start, within)

    async def call(self, what: str, **fields: Any) -> Line:
        """Run one command; return its outcome line (a result or an error)."""
        command_id = self.do(what, **fields)
        return await self.wait(lambda line: line.get("id") == command_id)

    def mark(self) -> int:
        with self._changed:
            return len(self.lines)

    def updates(self, start: int = 0) -> list[dict[str, Any]]:
        with self._changed:
            return [line["update"] for line in self.lines[start:] if line["event"] == "update"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        wait_or_kill(self.proc)


def said(kind: str, text: str) -> Callable[[Line], bool]:
    """An update of `kind` whose text holds `text`."""
    return lambda line: (
        line["event"] == "update"
        and line["update"].get("sessionUpdate") == kind
        and text in line["update"].get("content", {}).get("text", "")
    )


def chosen_option(options: list[dict[str, Any]]) -> str:
    once = [option for option in options if option["kind"] == "allow_once"]
    option_id: str = (once or options)[0]["optionId"]
    return option_id


@contextlib.contextmanager
def sharing(relay: RelayProcess, workdir: Path) -> Iterator[HostProcess]:
    """`tunnel host` sharing the fake ACP agent through `relay`."""
    workspace = workdir / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("remember the milk\n")
    process = HostProcess(
        relay.url,
        workdir,
        agent=f"acp:{sys.executable} {FAKE_ACP_AGENT}",
        workspace=workspace,
        log_db=workdir / "log.db",
        interactive=False,
    ).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    """One relay and host for the tests that leave them as they are (they share its log)."""
    workdir = tmp_path_factory.mktemp("shared")
    relay = RelayProcess(workdir).start()
    try:
        with sharing(relay, workdir) as process:
            yield process
    finally:
        relay.stop()


@pytest.fixture
def own_host(relay: RelayProcess, tmp_path: Path) -> Iterator[HostProcess]:
    """A host of the test's own, on the test's own relay, for a test that restarts the relay."""
    with sharing(relay, tmp_path) as process:
        yield process


async def _agent_said(teammate: Teammate, text: str) -> None:
    await teammate.wait_for(
        lambda t: any(
            i["type"] == "message"
            and i["data"].get("role") == "agent"
            and text in i["data"]["text"]
            for i in t.items
        )
    )


@pytest.mark.agents_real
@pytest.mark.timeout(120)
@pytest.mark.anyio
async def test_an_editor_loads_prompts_answers_and_follows_the_shared_session(
    host: HostProcess,
) -> None:
    sdk = acp_sdk()
    async with attached(host.drive_link, "alice") as alice:
        await alice.send(Prompt(text="before the editor"))
        await _agent_said(alice, "echo: before the editor")
        # A permission request already waiting when the editor attaches.
        await alice.send(Prompt(text="ask"))
        await alice.wait_for(lambda t: t.item_of("permission_request") is not None)
        waiting = alice.item_of("permission_request")
        assert waiting is not None
        editor = Editor(sdk, host.drive_link, "zed")
        try:
            init = await editor.call("initialize")
            capabilities = init["result"]["agentCapabilities"]
            assert capabilities["loadSession"] is True
            assert capabilities["promptCapabilities"]["image"] is False

            new = (await editor.call("new"))["result"]
            session = new["sessionId"]
            assert new["modes"]["currentModeId"] == "default"
            assert {"default", "plan"} <= {m["id"] for m in new["modes"]["availableModes"]}
            listed = (await editor.call("list"))["result"]["sessions"]
            assert [entry["sessionId"] for entry in listed] == [session]

            # The request that was waiting is put to the editor once it attached.
            asked = await editor.wait(lambda line: line["event"] == "permission")
            assert asked["requestId"] == waiting["data"]["request_id"]
            option_id = chosen_option(asked["params"]["options"])
            await editor.call("answer", requestId=asked["requestId"], optionId=option_id)
            await _agent_said(alice, f"chose {option_id}")
            decision = alice.item_of("permission_decision", request_id=asked["requestId"])
            assert decision is not None
            assert decision["created_by"] == "zed"

            # Load: the history arrives before the answer.
            mark = editor.mark()
            loaded = await editor.call("load", sessionId=session)
            assert loaded["event"] == "result", loaded
            history = editor.updates(mark)
            assert {"type": "text", "text": "before the editor"} in [
                u["content"] for u in history if u["sessionUpdate"] == "user_message_chunk"
            ]
            replies = "".join(
                u["content"]["text"] for u in history if u["sessionUpdate"] == "agent_message_chunk"
            )
            assert "echo: before the editor" in replies

            # A prompt: the reply streams, the turn ends with end_turn; the editor's own prompt
            # is not echoed back to it.
            mark = editor.mark()
            prompt_id = editor.do("prompt", sessionId=session, text="from the editor")
            await editor.wait(said("agent_message_chunk", "echo: from the editor"), start=mark)
            done = await editor.wait(lambda line: line.get("id") == prompt_id, start=mark)
            assert done["result"] == {"stopReason": "end_turn"}
            assert not any(u["sessionUpdate"] == "user_message_chunk" for u in editor.updates(mark))
            await alice.wait_for(
                lambda t: t.item_of("message", role="user", text="from the editor") is not None
            )
            assert alice.item_of("message", role="user", text="from the editor")["created_by"] == (
                "zed"
            )

            # A permission request, answered in the editor: the host takes the answer.
            mark = editor.mark()
            prompt_id = editor.do("prompt", sessionId=session, text="ask")
            asked = await editor.wait(lambda line: line["event"] == "permission", start=mark)
            option_id = chosen_option(asked["params"]["options"])
            await editor.call("answer", requestId=asked["requestId"], optionId=option_id)
            done = await editor.wait(lambda line: line.get("id") == prompt_id, start=mark)
            assert done["result"] == {"stopReason": "end_turn"}
            decision = alice.item_of("permission_decision", request_id=asked["requestId"])
            assert decision is not None
            assert decision["created_by"] == "zed"
            assert decision["data"]["option_id"] == option_id
            await editor.wait(said("agent_message_chunk", f"chose {option_id}"), start=mark)
            # The tool call asked about came as an update first, known by its turn.
            tool_call_id = asked["params"]["toolCall"]["toolCallId"]
            starts = [
                u
                for u in editor.updates(mark)
                if u["sessionUpdate"] == "tool_call" and u["toolCallId"] == tool_call_id
            ]
            assert len(starts) == 1
            assert starts[0]["kind"] == "edit"
            assert tool_call_id.split(":", 1)[0].isdigit()

            # Another teammate's prompt and its reply reach the editor as updates.
            mark = editor.mark()
            await alice.send(Prompt(text="from alice"))
            seen = await editor.wait(said("user_message_chunk", "from alice"), start=mark)
            assert seen["update"]["_meta"] == {"tunnel": {"by": "alice"}}
            await editor.wait(said("agent_message_chunk", "echo: from alice"), start=mark)

            # First answer wins: alice answers, the editor's question is withdrawn.
            mark = editor.mark()
            prompt_id = editor.do("prompt", sessionId=session, text="ask")
            asked = await editor.wait(lambda line: line["event"] == "permission", start=mark)
            option_id = chosen_option(asked["params"]["options"])
            await alice.send(PermissionAnswer(request_id=asked["requestId"], option_id=option_id))
            await editor.wait(
                lambda line: (
                    line["event"] == "withdrawn" and line["requestId"] == asked["requestId"]
                ),
                start=mark,
            )
            done = await editor.wait(lambda line: line.get("id") == prompt_id, start=mark)
            assert done["result"] == {"stopReason": "end_turn"}
            decision = alice.item_of("permission_decision", request_id=asked["requestId"])
            assert decision is not None
            assert decision["created_by"] == "alice"

            # Cancel: the turn ends with the stop reason cancelled.
            mark = editor.mark()
            prompt_id = editor.do("prompt", sessionId=session, text="wait")
            await editor.wait(said("agent_message_chunk", "."), start=mark)
            await editor.call("cancel", sessionId=session)
            done = await editor.wait(lambda line: line.get("id") == prompt_id, start=mark)
            assert done["result"] == {"stopReason": "cancelled"}

            # A cancel while the editor's prompt waits behind another's turn: that turn goes
            # on; the editor's own is cancelled as soon as it runs.
            mark = editor.mark()
            await alice.send(Prompt(text="wait"))
            await editor.wait(said("agent_message_chunk", "."), start=mark)

            def zeds_waits(t: Teammate) -> int:
                return sum(
                    1
                    for i in t.items
                    if i["created_by"] == "zed" and i["data"].get("text") == "wait"
                )

            before = zeds_waits(alice)
            prompt_id = editor.do("prompt", sessionId=session, text="wait")
            await alice.wait_for(lambda t: zeds_waits(t) > before)
            await editor.call("cancel", sessionId=session)
            await alice.send(Cancel())
            done = await editor.wait(lambda line: line.get("id") == prompt_id, start=mark)
            assert done["result"] == {"stopReason": "cancelled"}
            cancels = [
                i["created_by"]
                for i in alice.items
                if i["type"] == "session_event" and i["data"].get("what") == "cancelled"
            ]
            assert cancels[-2:] == ["alice", "zed"]

            # A mode switched from the editor: the host records it as the editor's change, and
            # the editor hears the new mode.
            mark = editor.mark()
            switched = await editor.call("set_mode", sessionId=session, modeId="plan")
            assert switched["event"] == "result", switched
            await editor.wait(
                lambda line: (
                    line["event"] == "update"
                    and line["update"]
                    == {"sessionUpdate": "current_mode_update", "currentModeId": "plan"}
                ),
                start=mark,
            )
            await alice.wait_for(
                lambda t: any(
                    i["data"].get("what") == "settings"
                    and i["data"].get("change") == {"mode": "plan"}
                    and i["created_by"] == "zed"
                    for i in t.items
                )
            )

            # The model, through ACP's unstable session/set_model.
            switched = await editor.call(
                "request",
                method="session/set_model",
                params={"sessionId": session, "modelId": "smart"},
            )
            assert switched["event"] == "result", switched
            await alice.wait_for(
                lambda t: any(
                    i["data"].get("change") == {"model": "smart"} and i["created_by"] == "zed"
                    for i in t.items
                )
            )

            # The editor closes stdin: `tunnel acp` ends with 0.
            quit_ = await editor.call("quit")
            assert quit_["result"] == {"code": 0}
        finally:
            editor.stop()


@pytest.mark.agents_real
@pytest.mark.timeout(120)
@pytest.mark.anyio
async def test_a_view_link_editor_watches_and_its_prompt_is_refused(host: HostProcess) -> None:
    sdk = acp_sdk()
    async with attached(host.drive_link, "alice") as alice:
        editor = Editor(sdk, host.view_link, "vera")
        try:
            await editor.call("initialize", capabilities=ELICITS)
            session = (await editor.call("new"))["result"]["sessionId"]
            refused = await editor.call("prompt", sessionId=session, text="let me drive")
            assert refused["event"] == "error"
            assert refused["code"] == -32600
            assert "view link" in refused["message"]
            mark = editor.mark()
            await alice.send(Prompt(text="watch this"))
            await editor.wait(said("agent_message_chunk", "echo: watch this"), start=mark)
            assert alice.item_of("message", role="user", text="let me drive") is None
            # A permission request: the observer sees the tool call, and is asked nothing.

            def requests(t: Teammate, kind: str = "permission_request") -> list[dict[str, Any]]:
                return [i for i in t.items if i["type"] == kind]

            before = len(requests(alice))
            mark = editor.mark()
            await alice.send(Prompt(text="ask"))
            await editor.wait(
                lambda line: (
                    line["event"] == "update" and line["update"]["sessionUpdate"] == "tool_call"
                ),
                start=mark,
            )
            await alice.wait_for(lambda t: len(requests(t)) > before)
            request = requests(alice)[-1]
            option_id = request["data"]["options"][0]["option_id"]
            request_id = request["data"]["request_id"]
            await alice.send(PermissionAnswer(request_id=request_id, option_id=option_id))
            await editor.wait(said("agent_message_chunk", f"chose {option_id}"), start=mark)
            assert not any(line["event"] == "permission" for line in editor.lines)
            # A question of the agent's: an observer is not asked, though its editor could be.
            asked = len(requests(alice, "elicitation_request"))
            mark = editor.mark()
            await alice.send(Prompt(text="elicit"))
            await alice.wait_for(lambda t: len(requests(t, "elicitation_request")) > asked)
            request_id = requests(alice, "elicitation_request")[-1]["data"]["request_id"]
            await alice.send(ElicitationAnswer(request_id=request_id, action="decline"))
            await editor.wait(said("agent_message_chunk", "answered decline"), start=mark)
            assert not any(line["event"] == "question" for line in editor.lines)
        finally:
            editor.stop()


@pytest.mark.agents_real
@pytest.mark.timeout(120)
@pytest.mark.anyio
async def test_an_editor_that_answers_questions_is_asked_the_agents_and_first_answer_wins(
    host: HostProcess,
) -> None:
    sdk = acp_sdk()
    async with attached(host.drive_link, "alice") as alice:
        zed = Editor(sdk, host.drive_link, "zed-q")
        plain = Editor(sdk, host.drive_link, "plain")
        try:

            def questions(t: Teammate) -> list[dict[str, Any]]:
                return [i for i in t.items if i["type"] == "elicitation_request"]

            # A question already waiting when the editor attaches is put to it after the attach.
            await alice.wait_for(lambda t: t.snapshot_done)
            before = len(questions(alice))
            await alice.send(Prompt(text="elicit"))
            await alice.wait_for(lambda t: len(questions(t)) > before)
            waiting = questions(alice)[-1]["data"]["request_id"]
            await zed.call("initialize", capabilities=ELICITS)
            await plain.call("initialize")
            session = (await zed.call("new"))["result"]["sessionId"]
            await plain.call("new")
            asked = await zed.wait(lambda line: line["event"] == "question")
            assert asked["requestId"] == waiting
            await zed.call("answer", requestId=waiting, action="decline")
            await alice.wait_for(lambda t: t.item_of("elicitation_response", request_id=waiting))
            response = alice.item_of("elicitation_response", request_id=waiting)
            assert response is not None
            assert response["created_by"] == "zed-q"

            # Asked in the editor, answered there: the host takes the answer as the editor's.
            mark = zed.mark()
            prompt_id = zed.do("prompt", sessionId=session, text="elicit")
            asked = await zed.wait(lambda line: line["event"] == "question", start=mark)
            params = asked["params"]
            assert (params["sessionId"], params["mode"], params["message"]) == (
                session,
                "form",
                "Pick",
            )
            # The form the editor gets is the agent's, as the host checked it.
            assert form_fields(params["requestedSchema"]) == form_fields(FORM)
            answer = {"name": "ann", "color": "g", "urgent": True}
            await zed.call("answer", requestId=asked["requestId"], action="accept", content=answer)
            done = await zed.wait(lambda line: line.get("id") == prompt_id, start=mark)
            assert done["result"] == {"stopReason": "end_turn"}
            await _agent_said(
                alice, 'answered accept {"color": "g", "name": "ann", "urgent": true}'
            )
            response = alice.item_of("elicitation_response", request_id=asked["requestId"])
            assert response is not None
            assert response["created_by"] == "zed-q"
            assert response["data"]["content"] == answer

            # First answer wins: alice answers, the editor's question is withdrawn.
            before = len(questions(alice))
            mark, plain_mark = zed.mark(), plain.mark()
            await alice.send(Prompt(text="elicit"))
            asked = await zed.wait(lambda line: line["event"] == "question", start=mark)
            await alice.wait_for(lambda t: len(questions(t)) > before)
            assert questions(alice)[-1]["data"]["request_id"] == asked["requestId"]
            await alice.send(ElicitationAnswer(request_id=asked["requestId"], action="decline"))
            await zed.wait(
                lambda line: (
                    line["event"] == "withdrawn" and line["requestId"] == asked["requestId"]
                ),
                start=mark,
            )
            await alice.wait_for(
                lambda t: t.item_of("elicitation_response", request_id=asked["requestId"])
            )
            response = alice.item_of("elicitation_response", request_id=asked["requestId"])
            assert response is not None
            assert response["created_by"] == "alice"
            # The editor's question is closed: nothing is left there to answer.
            late = await zed.call(
                "answer", requestId=asked["requestId"], action="accept", content=answer
            )
            assert late["result"] == {"answered": False}
            # An editor that did not say it answers questions is never asked one.
            await plain.wait(said("agent_message_chunk", "answered decline"), start=plain_mark)
            assert not any(line["event"] == "question" for line in plain.lines)
        finally:
            zed.stop()
            plain.stop()


def test_a_bad_link_is_one_line_and_exit_2() -> None:
    result = subprocess.run(
        [*TUNNEL, "acp", "https://relay.example/h/nothing"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("tunnel acp: ")
    assert result.stdout == ""


async def _ready(session: TeammateSession) -> None:
    await session.receive()  # the host's `ready`: the session channel works


@pytest.mark.agents_real
@pytest.mark.timeout(120)
@pytest.mark.anyio
async def test_the_editor_stays_attached_across_a_relay_restart(
    relay: RelayProcess, own_host: HostProcess, tmp_path: Path
) -> None:
    host = own_host
    sdk = acp_sdk()
    editor = Editor(sdk, host.drive_link, "zed")
    restarted: RelayProcess | None = None
    try:
        await editor.call("initialize")
        session = (await editor.call("new"))["result"]["sessionId"]
        mark = editor.mark()
        relay.kill()
        await editor.wait(
            lambda line: line["event"] == "stderr" and "retrying" in line["line"], start=mark
        )
        restarted = RelayProcess(tmp_path, port=relay.port).start()
        await wait_online(host.drive_link, probe=_ready)
        async with attached(host.drive_link, "bob") as bob:
            await bob.send(Prompt(text="after the restart"))
            await editor.wait(said("user_message_chunk", "after the restart"), start=mark)
            await editor.wait(said("agent_message_chunk", "echo: after the restart"), start=mark)
        mark = editor.mark()
        prompt_id = editor.do("prompt", sessionId=session, text="back again")
        done = await editor.wait(lambda line: line.get("id") == prompt_id, start=mark)
        assert done["result"] == {"stopReason": "end_turn"}
        assert editor.updates(mark)  # the reply came as updates
    finally:
        editor.stop()
        if restarted is not None:
            restarted.stop()


def unreachable_link() -> ShareLink:
    """A link to a loopback port where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return ShareLink(
        relay_url=f"http://127.0.0.1:{port}",
        host_id=HostIdentity.generate().host_id,
        role="drive",
        secret=os.urandom(32),
    )


@pytest.mark.timeout(60)
def test_giving_up_on_an_unreachable_relay_is_one_line_and_exit_4() -> None:
    proc = subprocess.Popen(
        [*TUNNEL, "acp", "--give-up-after", "0.5"],
        cwd=ROOT,
        env=dict(os.environ, TUNNEL_LINK=str(unreachable_link())),
        stdin=subprocess.PIPE,  # the editor is still there: the bridge ends by itself
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.wait(30) == 4
        assert proc.stderr is not None
        lines = proc.stderr.read().decode().splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
        wait_or_kill(proc)
    assert lines[-1].startswith("tunnel acp: cannot reach the relay")
    assert lines[-1].endswith("gave up after 0.5 s")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_a_signal_ends_it_with_the_code_every_command_gives(
    signum: signal.Signals, code: int
) -> None:
    proc = subprocess.Popen(
        [*TUNNEL, "acp"],
        cwd=ROOT,
        env=dict(os.environ, TUNNEL_LINK=str(unreachable_link())),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        assert "retrying" in proc.stderr.readline().decode()  # running, waiting for the relay
        proc.send_signal(signum)
        assert proc.wait(15) == code
    finally:
        if proc.poll() is None:
            proc.kill()
        wait_or_kill(proc)


@pytest.mark.timeout(60)
def test_a_link_the_relay_refuses_ends_it_with_one_line_and_exit_3(host: HostProcess) -> None:
    wrong = dataclasses.replace(ShareLink.parse(host.drive_link), secret=os.urandom(32))
    proc = subprocess.Popen(
        [*TUNNEL, "acp"],
        cwd=ROOT,
        env=dict(os.environ, TUNNEL_LINK=str(wrong)),
        stdin=subprocess.PIPE,  # the editor is still there: the bridge ends by itself
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.wait(30) == 3
        assert proc.stderr is not None
        lines = proc.stderr.read().decode().splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
        wait_or_kill(proc)
    assert len(lines) == 1, lines
    assert lines[0].startswith("tunnel acp: the relay does not accept this link")
