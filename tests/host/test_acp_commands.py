"""Typed commands against a real ACP agent, through a real relay: `tunnel attach` and the host
console show the whole tool call of a permission request and every option, answer with the
narrowest option, switch modes and models, and pass the agent's own slash commands to it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import RelayProcess
from tunnel.app.requests import SetMode

from .conftest import acp_spec, sharing
from .teammate import attached
from .test_host_and_attach_commands import _read_until, _start_attach, _start_host, _stop

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def _type(proc: subprocess.Popen[bytes], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line.encode() + b"\n")
    proc.stdin.flush()


async def test_attach_sees_the_tool_call_answers_allow_once_and_drives_modes_and_commands(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    host = _start_host(relay, tmp_path, workspace, "--no-interactive")
    attach = None
    try:
        drive_link = (await _read_until(host, r"drive link: (\S+)")).group(1)
        attach = _start_attach(drive_link, "alice")
        await _read_until(attach, r"attached as alice \(drive\)")
        _type(attach, "ask")
        await _read_until(attach, r"permission\? Edit notes\.txt", lines=200)
        await _read_until(attach, r"kind: edit")
        await _read_until(attach, r"^-milk")
        await _read_until(attach, r"^\+bread")
        await _read_until(attach, r"1\. Yes, and bypass permissions \(allow_always")
        await _read_until(attach, r"3\. Yes, and manually approve edits \(allow_once, id default\)")
        # The narrowest allow option, never bypass, never an "always" one.
        _type(attach, "/allow")
        await _read_until(attach, r"alice chose Yes, and manually approve edits \(allow_once\)")
        await _read_until(attach, r"agent: chose default")

        _type(attach, "/mode plan")
        await _read_until(attach, r"alice set the mode to plan")
        _type(attach, "/mode")
        await _read_until(attach, r"mode: plan \(Plan\); available: default \(Default\), plan")
        _type(attach, "/compact")
        await _read_until(attach, r"alice: /compact")
        await _read_until(attach, r"agent: echo: /compact")
        _type(attach, "/help")
        await _read_until(attach, r"the agent's commands: /compact \(Compact the context\)")
        _type(attach, "/quit")
        assert attach.wait(15) == 0
    finally:
        if attach is not None:
            _stop(attach)
        assert _stop(host) == 0


async def test_the_host_console_answers_always_without_bypass_and_switches_the_model(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    host = _start_host(relay, tmp_path, workspace, "--name", "hannah")
    try:
        await _read_until(host, r"drive link: (\S+)")
        _type(host, "ask")
        await _read_until(host, r"4\. No, keep planning \(reject_once, id plan\)", lines=200)
        _type(host, "/allow always")
        await _read_until(host, r"hannah chose Yes, and auto-accept edits \(allow_always\)")
        await _read_until(host, r"agent: chose acceptEdits")
        _type(host, "/model smart")
        await _read_until(host, r"hannah set the model to smart")
        _type(host, "settings")
        await _read_until(host, r"agent: mode default model smart")
    finally:
        assert _stop(host) == 0


async def test_a_viewer_cannot_switch_the_mode(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    async with (
        sharing(relay.url, tmp_path, agent=acp_spec(), workspace=workspace) as shared,
        attached(str(shared.host.view_link), "vera") as vera,
        attached(str(shared.host.drive_link), "alice") as alice,
    ):
        await vera.send(SetMode(mode_id="plan"))
        await vera.wait_for(lambda t: t.errors)
        assert vera.errors[0]["code"] == "forbidden"
        await alice.send(SetMode(mode_id="yolo"))
        await alice.wait_for(lambda t: t.errors)
        assert alice.errors[0]["code"] == "unknown_request"
        await alice.send(SetMode(mode_id="plan"))
        await alice.wait_for(
            lambda t: (
                t.item_of("session_event", what="settings", change={"mode": "plan"}) is not None
            )
        )
        changed = alice.item_of("session_event", what="settings", change={"mode": "plan"})
        assert changed is not None
        assert changed["created_by"] == "alice"
        # The viewer is told too: the same cast, read by its own task (waited for, not assumed
        # read by the time alice's was).
        await vera.wait_for(
            lambda t: (
                t.item_of("session_event", what="settings", change={"mode": "plan"}) is not None
            )
        )
