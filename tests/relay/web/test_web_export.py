"""`tunnel log export --html`: the file, opened from disk in chromium with every request refused,
shows each item of a log the host's own code wrote, as the page does, and checks its signatures.

The log is written by the host's path for it: an ACP session of the fake agent
(tests/agents/fake_acp_agent.py) recording into a SQLite log while `HeadSigner` signs its head
after each turn and at the end. Hostile markdown is the page's own corpus (test_web_markup.py).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.log.helpers import tunnel
from tunnel.agents import create_session
from tunnel.e2e.identity import HostIdentity
from tunnel.host.audit import HeadSigner
from tunnel.log import Item, Log, NewItem, SQLiteStore
from tunnel.process.exit_codes import EXIT_CORRUPT

from .markup_acp_agent import HOSTILE
from .test_web_markup import MARKDOWN_STATE, assert_inert, hostile_markdown, page_names

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[3]
FAKE_AGENT = ROOT / "tests" / "agents" / "fake_acp_agent.py"
WAIT = 30.0
MARKDOWN_PROMPT = (
    "A **bold** word, a [link](https://example.com/docs) and\n\n```python\nprint(1)\n```"
)
# The header's own controls in a transcript: no composer, no name, no role.
CONTROLS = ["connection-status", "agent-name"]


@dataclass
class Recorded:
    db: Path
    host_id: str
    items: list[Item] = field(default_factory=list)


async def _wait_for(log: Log, type_: str, **data: object) -> Item:
    with anyio.fail_after(WAIT):
        while True:
            for item in await log.query("main", types=[type_], limit=1000):
                if all(str(v) in str(item.data.get(k)) for k, v in data.items()):
                    return item
            await anyio.sleep(0.02)


async def _record(db: Path, workspace: Path) -> Recorded:
    identity = HostIdentity.generate()
    store = SQLiteStore(db)
    async with Log(store) as log:
        session = create_session(
            f"acp:{sys.executable} {FAKE_AGENT}", log, workspace=workspace, conversation_id="main"
        )
        signer = HeadSigner(
            identity=identity, log=log, store=store, conversation_id="main", interval=None
        )
        async with anyio.create_task_group() as tg:
            await tg.start(signer.run)
            with anyio.fail_after(WAIT):
                await tg.start(session.run)
            # A tool call whose permission asks about an edit with its diff; alice allows it.
            await session.prompt("ask", by="alice")
            request = await _wait_for(log, "permission_request")
            option = request.data["options"][-1]["option_id"]
            await session.answer_permission(request.data["request_id"], option, by="alice")
            await _wait_for(log, "message", text="chose")
            # Reasoning, a plan, a read tool call asked about and allowed, refusals, a reply.
            await session.prompt("work", by="bob")
            await _wait_for(log, "permission_request", title="Read notes.txt")
            asked = await log.query("main", after=request.seq, types=["permission_request"])
            await session.answer_permission(asked[0].data["request_id"], "yes", by="bob")
            await _wait_for(log, "message", text="Done.")
            await session.prompt(MARKDOWN_PROMPT, by="alice")
            await _wait_for(log, "message", text="echo: A **bold**")
            tg.cancel_scope.cancel()
        await signer.close()
        items = await log.query("main", limit=1000)
    return Recorded(db=db, host_id=identity.host_id, items=items)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    base = tmp_path_factory.mktemp("export")
    workspace = base / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("milk\n")
    # The browser's event loop holds this thread: the host's code runs its own in another.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, _record, base / "log.db", workspace).result(timeout=120)


@dataclass
class Opened:
    page: Page
    requests: list[str]
    errors: list[str]


@pytest.fixture
def open_file(browser: Browser) -> Iterator[Any]:
    contexts = []

    def open_(path: Path) -> Opened:
        context = browser.new_context(viewport={"width": 1200, "height": 860})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        opened = Opened(page=page, requests=[], errors=[])
        url = path.as_uri()

        def route(route: Any) -> None:
            opened.requests.append(route.request.url)
            if route.request.url == url:
                route.continue_()
            else:
                route.abort()

        context.route("**/*", route)
        page.on("pageerror", lambda error: opened.errors.append(str(error)))
        page.goto(url)
        expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")
        return opened

    yield open_
    for context in contexts:
        context.close()


def export(db: Path, out: Path, *args: str, code: int = 0) -> str:
    done = tunnel("log", "export", "main", "--db", str(db), "--html", str(out), *args)
    assert done.returncode == code, done.stderr
    return done.stderr


def shown_seqs(page: Page) -> set[int]:
    """Every seq the page shows an element for, or folded into an earlier card."""
    seqs: list[str] = page.evaluate(
        """() => [...document.querySelectorAll(
            "[data-seq], [data-decision-seq], [data-latest-seq]")]
          .flatMap((e) => [e.dataset.seq, e.dataset.decisionSeq, e.dataset.latestSeq])
          .filter((s) => s !== undefined)"""
    )
    return {int(seq) for seq in seqs}


def test_every_item_of_a_hosts_log_is_shown_offline_and_its_signature_verified(
    recorded: Recorded, open_file: Any, tmp_path: Path
) -> None:
    out = tmp_path / "main.html"
    said = export(recorded.db, out)
    last = recorded.items[-1].seq
    assert said == f"wrote {out}: items 0..{last} of main\n"
    opened = open_file(out)
    page = opened.page

    types = {item.type for item in recorded.items}
    assert {"message", "reasoning", "plan", "tool_call", "permission_request"} <= types
    assert "permission_decision" in types
    shown = shown_seqs(page)
    for item in recorded.items:
        if item.type in ("tool_call_update", "tool_result"):
            # Folded into the card of its call.
            card = page.locator(
                f"[data-testid=tool-call][data-tool-call-id={item.data['tool_call_id']}]"
            )
            expect(card.first).to_be_visible()
        elif item.type == "plan":
            expect(
                page.locator(f"[data-testid=plan][data-turn='{item.data['turn']}']")
            ).to_have_count(1)
        else:
            assert item.seq in shown, f"item {item.seq} ({item.type}) is not shown"
        if item.type == "message":
            first_word = str(item.data["text"]).split()[0]
            expect(page.locator(f"[data-seq='{item.seq}']")).to_contain_text(first_word)

    # The edit's diff, the decisions with who made them, the markdown rendered as markdown.
    ask = page.locator("[data-testid=permission-request]").first
    expect(ask.locator(".diff-add").first).to_contain_text("bread")
    expect(ask.locator(".diff-del").first).to_contain_text("milk")
    decisions = page.get_by_test_id("permission-decision")
    expect(decisions).to_have_count(2)
    expect(decisions.first).to_have_attribute("data-by", "alice")
    expect(decisions.last).to_have_attribute("data-by", "bob")
    reply = page.locator("[data-testid=message][data-role=agent]", has_text="echo:")
    expect(reply.locator("strong")).to_have_text("bold")
    expect(reply.locator("a[href='https://example.com/docs']")).to_have_attribute(
        "rel", "noopener noreferrer nofollow"
    )
    expect(reply.locator("pre > code")).to_contain_text("print(1)")

    mark = page.get_by_test_id("verified-mark")
    expect(mark).to_have_attribute("data-state", "verified")
    expect(mark).to_have_attribute("data-to", str(last))
    expect(mark).to_have_attribute(
        "title",
        f"Items #0 to #{last} are exactly what host {recorded.host_id} signed. "
        "Compare this id with the one in the host's links.",
    )
    audit = page.get_by_test_id("transcript-audit")
    expect(audit).to_have_attribute("data-ok", "true")
    expect(audit).to_contain_text(
        f"chain intact; signed by host {recorded.host_id} up to seq {last}"
    )
    assert opened.requests == [out.as_uri()]
    assert opened.errors == []

    # Up to a seq: the items after it are left out, and so are the signatures over them.
    cut = next(i.seq for i in recorded.items if i.type == "permission_decision")
    upto = tmp_path / "upto.html"
    export(recorded.db, upto, "--upto", str(cut))
    page = open_file(upto).page
    assert max(shown_seqs(page)) == cut
    expect(page.get_by_test_id("transcript-audit")).to_have_attribute("data-ok", "true")
    expect(page.get_by_test_id("verified-mark")).not_to_have_attribute("data-state", "failed")


def test_a_tampered_log_is_exported_saying_it_does_not_verify(
    recorded: Recorded, open_file: Any, tmp_path: Path
) -> None:
    db = tmp_path / "tampered.db"
    shutil.copyfile(recorded.db, db)
    changed = next(i for i in recorded.items if i.type == "permission_decision")
    with sqlite3.connect(db) as raw:
        data = dict(changed.data, option_id="reject", option_name="Reject")
        raw.execute(
            "UPDATE items SET data = ? WHERE conversation_id = 'main' AND seq = ?",
            (json.dumps(data), changed.seq),
        )
    out = tmp_path / "tampered.html"
    said = export(db, out, code=EXIT_CORRUPT)
    assert said.splitlines()[0] == f"wrote {out}: items 0..{recorded.items[-1].seq} of main"
    assert said.splitlines()[1].startswith(f"tunnel log: {out}: the audit chain does not verify")
    assert "does not match the chain" in said
    page = open_file(out).page
    expect(page.get_by_test_id("verified-mark")).to_have_attribute("data-state", "failed")
    audit = page.get_by_test_id("transcript-audit")
    expect(audit).to_have_attribute("data-ok", "false")
    expect(audit.get_by_test_id("transcript-audit-problems")).to_contain_text(
        "does not match the chain"
    )


def hostile_items(markdown: str) -> list[NewItem]:
    """The corpus in every place an item carries text: markdown and plain fields alike."""
    script = "</script><script>window.__pwned = 5</script><!--<script>"
    return [
        NewItem(type="message", data={"role": "user", "text": markdown}, created_by=script[:60]),
        NewItem(
            type="message",
            data={"role": "agent", "text": HOSTILE + markdown + script},
            created_by="agent",
        ),
        NewItem(type="reasoning", data={"text": HOSTILE + markdown}, created_by="agent"),
        NewItem(
            type="tool_call",
            data={
                "tool_call_id": "t1",
                "title": script,
                "kind": "edit x screen",
                "status": "completed",
                "content": [
                    {"type": "content", "content": {"type": "text", "text": HOSTILE + script}}
                ],
                "input": {"html": script},
            },
            created_by="agent",
        ),
        NewItem(
            type="permission_request",
            data={
                "request_id": "r1",
                "title": HOSTILE,
                "tool_call_id": "t1",
                "options": [{"option_id": "ok", "name": script, "kind": "allow_once"}],
            },
            status="action_required",
            created_by="agent",
        ),
        NewItem(type="error", data={"message": script}, created_by="host"),
        # A terminal agent's screen: its text only, the sequences that draw it dropped.
        NewItem(
            type="terminal",
            data={"text": "\x1b]0;pwned\x07\x1b[31mred\x1b[0m " + script + "\r\n"},
            created_by="agent",
        ),
        NewItem(type=script[:40].replace("<", "x"), data={"text": script}, created_by="host"),
    ]


def test_the_pages_hostile_markdown_stays_inert_in_an_export(
    recorded: Recorded, open_file: Any, tmp_path: Path
) -> None:
    plain = tmp_path / "plain.html"
    export(recorded.db, plain)
    names = page_names(open_file(plain).page)

    db = tmp_path / "hostile.db"

    async def write() -> None:
        async with Log(SQLiteStore(db)) as log:
            for item in hostile_items(hostile_markdown(names["classes"], names["ids"])):
                await log.append("main", item)

    with ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, write).result(timeout=60)
    out = tmp_path / "hostile.html"
    export(db, out)
    opened = open_file(out)
    page = opened.page
    expect(page.locator("[data-testid=message][data-role=agent]")).to_contain_text(
        "every class at once"
    )
    assert page.evaluate("() => window.__pwned") is None
    assert page.locator("script").count() == 2  # the file's own: its data and its code
    foreign = "dialog, form, input, iframe, object, embed, style, script, svg, [onerror], [style]"
    assert page.get_by_test_id("conversation").locator(foreign).count() == 0
    assert_inert(page, names, CONTROLS)
    state: dict[str, Any] = page.evaluate(MARKDOWN_STATE, names)
    assert state["blocks"] == 3
    expect(page.get_by_test_id("tool-call")).to_contain_text("</script><script>window.__pwned = 5")
    terminal = page.get_by_test_id("terminal-text")
    expect(terminal).to_have_text(
        "red " + "</script><script>window.__pwned = 5</script><!--<script>\n"
    )
    assert opened.requests == [out.as_uri()]
    assert opened.errors == []
