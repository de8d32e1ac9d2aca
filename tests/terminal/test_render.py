"""`tunnel attach` shows whatever names and texts others choose as text, never as markup."""

from __future__ import annotations

import io

from rich.console import Console

from tunnel.app.follower import Presence
from tunnel.app.host_messages import Error, Member, Ready
from tunnel.e2e.crypto import ShareLink, new_secret
from tunnel.teammate.attach import Attachment, AttachSettings
from tunnel.terminal.render import render_event, render_item


def _attachment() -> tuple[Attachment, io.StringIO]:
    out = io.StringIO()
    link = ShareLink(
        relay_url="http://127.0.0.1:1", host_id="a" * 26, role="view", secret=new_secret()
    )
    attachment = Attachment(
        AttachSettings(link=link, name="me"),
        console=Console(file=out, width=200, color_system=None),
        stdin=io.StringIO(),
    )
    return attachment, out


def test_markup_in_names_and_messages_is_shown_literally() -> None:
    attachment, out = _attachment()
    member = Member(name="[/x] alice [laptop]", role="view")
    attachment._show(
        Presence(members=[member], count=1, whole=True, you=None, joined=[member], left=[])
    )
    attachment._show(Error(code="forbidden", message="[bold]no[/bold]"))
    attachment._show(
        Ready(
            conversation_id="c",
            name="[/oops]",
            role="view",
            agent_name="demo",
            agent_kind="chat",
        )
    )
    text = out.getvalue()
    assert "[/x] alice [laptop] (view)" in text
    assert "[bold]no[/bold]" in text
    assert "attached as [/oops] (view)" in text


def _plain(item: dict[str, object]) -> str:
    return render_item(item).plain


def test_a_permission_request_shows_the_tool_call_and_numbers_every_option() -> None:
    text = _plain(
        {
            "seq": 7,
            "type": "permission_request",
            "data": {
                "request_id": "perm_1",
                "title": "Edit notes.txt",
                "tool_call": {
                    "tool_call_id": "c1",
                    "kind": "edit",
                    "locations": [{"path": "notes.txt", "line": 3}],
                    "input": {"file_path": "notes.txt", "replace_all": False},
                    "content": [
                        {
                            "type": "diff",
                            "path": "notes.txt",
                            "old_text": "keep\nmilk\n",
                            "new_text": "keep\nbread\n",
                        }
                    ],
                },
                "options": [
                    {"option_id": "allow_always", "name": "Always Allow", "kind": "allow_always"},
                    {"option_id": "allow", "name": "Allow", "kind": "allow_once"},
                ],
            },
        }
    )
    assert "permission? Edit notes.txt" in text
    assert "kind: edit" in text
    assert "where: notes.txt:3" in text
    assert '"replace_all": false' in text  # the raw input, pretty-printed JSON
    assert "--- notes.txt\n+++ notes.txt\n@@ -1,2 +1,2 @@\n keep\n-milk\n+bread" in text
    assert "1. Always Allow (allow_always, id allow_always)" in text
    assert "2. Allow (allow_once, id allow)" in text


def test_a_new_file_diff_comes_from_dev_null_and_cut_calls_say_so() -> None:
    text = _plain(
        {
            "seq": 1,
            "type": "tool_call",
            "data": {
                "title": "Write",
                "truncated": True,
                "content": [
                    {"type": "diff", "path": "n.txt", "old_text": None, "new_text": "hi\n"}
                ],
            },
        }
    )
    assert "--- /dev/null\n+++ n.txt" in text
    assert "+hi" in text
    assert "(cut: too large to store whole)" in text


def test_decisions_settings_commands_and_terminals_read_as_sentences() -> None:
    decision = _plain(
        {
            "seq": 2,
            "type": "permission_decision",
            "created_by": "bob",
            "data": {"option_id": "allow", "option_name": "Allow", "option_kind": "allow_once"},
        }
    )
    assert decision.endswith("bob chose Allow (allow_once)")
    settings = _plain(
        {
            "seq": 3,
            "type": "session_event",
            "created_by": "alice",
            "data": {
                "what": "settings",
                "change": {"mode": "plan"},
                "modes": {"current": "plan", "available": [{"id": "plan", "name": "Plan"}]},
                "models": None,
                "approval": {"asks": True, "text": "asks before edits and commands"},
            },
        }
    )
    assert "alice set the mode to plan" in settings
    assert "mode: plan (Plan)" in settings
    assert "the agent asks before edits and commands" in settings
    commands = _plain(
        {
            "seq": 4,
            "type": "session_event",
            "data": {"what": "commands", "commands": [{"name": "compact"}, {"name": "init"}]},
        }
    )
    assert commands.endswith("the agent's commands: /compact, /init")
    unknown = _plain(
        {"seq": 5, "type": "session_event", "data": {"what": "unsupported_update", "kind": "x"}}
    )
    assert unknown.endswith("unsupported update: x")
    terminal = _plain(
        {
            "seq": 6,
            "type": "tool_terminal",
            "data": {"command": ["make", "test"], "output": "ok\n", "exit_code": 2, "signal": None},
        }
    )
    assert "terminal make test [exit code 2]\nok" in terminal


def test_the_hosts_storage_state_is_a_line_of_its_own() -> None:
    failing = render_event(
        {
            "kind": "storage",
            "data": {"state": "failing", "reason": "disk I/O error", "retry_in": 1.5},
        }
    )
    assert failing is not None
    assert (
        failing.plain
        == "[the host's log cannot be written (disk I/O error): paused; retrying in 1.5s]"
    )
    back = render_event({"kind": "storage", "data": {"state": "ok", "reason": "disk I/O error"}})
    assert back is not None
    assert "writes again" in back.plain


def test_the_approval_policy_shows_what_a_request_needs_and_why_it_was_decided() -> None:
    request = render_item(
        {
            "type": "permission_request",
            "created_by": "agent",
            "data": {
                "request_id": "p1",
                "title": "make deploy",
                "options": [{"option_id": "yes", "name": "Allow", "kind": "allow_once"}],
                "approval": {
                    "answer": ["alice", "bob"],
                    "approvals": 2,
                    "approved_by": [],
                    "remember": "once",
                    "rule": {"index": 3, "line": 10, "rule": 'verdict = "ask"'},
                },
            },
        }
    ).plain
    assert "needs 2 approvals (from alice or bob)" in request
    assert 'by rule 3: verdict = "ask"' in request
    approval = render_item(
        {
            "type": "permission_approval",
            "created_by": "alice",
            "data": {"request_id": "p1", "approved_by": ["alice"], "needed": 1},
        }
    ).plain
    assert approval == "approval needs 2 approvals: alice approved"
    by_policy = render_item(
        {
            "type": "permission_decision",
            "created_by": "policy",
            "data": {
                "request_id": "p2",
                "outcome": "selected",
                "option_id": "no",
                "option_name": "Reject",
                "option_kind": "reject_once",
                "policy": {
                    "source": "team.toml",
                    "index": 2,
                    "line": 6,
                    "rule": 'verdict = "deny"',
                },
            },
        }
    ).plain
    assert by_policy == (
        "decision the policy chose Reject (reject_once)\n"
        '  by the policy, rule 2 of team.toml:6: verdict = "deny"'
    )
    two = render_item(
        {
            "type": "permission_decision",
            "created_by": "bob",
            "data": {
                "request_id": "p1",
                "outcome": "selected",
                "option_id": "yes",
                "option_name": "Allow",
                "option_kind": "allow_once",
                "approved_by": ["alice", "bob"],
            },
        }
    ).plain
    assert two.endswith("approved by alice, bob")


def test_a_fenced_read_or_bash_result_is_shown_as_its_code_without_the_fences() -> None:
    read = "```\n1  def f():\n2      return '<b>[bold]x[/bold]</b>'\n```"
    bash = "```console\n$ echo hi\nhi\n```"
    call = {
        "seq": 1,
        "type": "tool_call_update",
        "data": {
            "tool_call_id": "read-1",
            "status": "completed",
            "content": [{"type": "text", "text": read}, {"type": "text", "text": bash}],
        },
    }
    shown = render_item(call).plain
    assert "```" not in shown
    assert "2      return '<b>[bold]x[/bold]</b>'" in shown  # the code, as text
    assert "$ echo hi\nhi" in shown
    result = {"seq": 2, "type": "tool_result", "data": {"ok": True, "output": bash}}
    assert render_item(result).plain == "result $ echo hi\nhi"


def test_text_that_is_not_one_fenced_block_keeps_its_fences() -> None:
    for text in ("see ```x```", "```\na\n```\nb\n```\nc\n```", "```\nopen only"):
        result = {"seq": 1, "type": "tool_result", "data": {"ok": True, "output": text}}
        assert render_item(result).plain == f"result {text}"


def test_a_tool_result_with_no_output_says_so_rather_than_an_empty_result() -> None:
    failed = {"seq": 1, "type": "tool_result", "data": {"ok": False, "output": ""}}
    assert render_item(failed).plain == "result: failed, no output"
    empty = {"seq": 2, "type": "tool_result", "data": {"ok": True, "output": "\n"}}
    assert render_item(empty).plain == "result: none"


def test_a_conversations_start_close_and_forks_read_as_sentences() -> None:
    def said(created_by: str, **data: object) -> str:
        item = {"type": "session_event", "created_by": created_by, "data": data}
        return render_item(item).plain

    assert said("ann", what="conversation_started", agent="other") == (
        "ann started this conversation with other"
    )
    resumed = said("ann", what="conversation_started", agent="fake", resume="s-\x1b[2J1")
    assert (
        resumed
        == "ann started this conversation with fake, resuming the agent's session s-\\x1b[2J1"
    )
    assert said("bo", what="conversation_closed") == (
        "bo closed this conversation: its agent stopped, its log stays"
    )
    fork = said("ann", what="session_fork", upto=12, agent="demo", **{"from": "main"})
    assert fork == "ann forked this conversation from main at item 12"
    source = said("ann", what="session_fork", to="c-\x1b]2;x\x07", upto=12)
    assert source == "ann forked this conversation at item 12 into c-\\x1b]2;x\\x07"
