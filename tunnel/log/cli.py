"""`tunnel log ...`: list, show, check, export and import the conversations in a log database,
verify an export's audit chain and print its audit.

Every command but `import` opens the database read-only and changes nothing in it; `verify`
reads only the file it is given.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, TypeVar

import typer

from tunnel.log.errors import StoreError
from tunnel.log.paths import DB_ENV_VAR, default_db_path
from tunnel.process.exit_codes import EXIT_CONFIG, EXIT_CORRUPT

# Stored text may hold terminal escapes; printed raw they would drive the reader's terminal.
# (A light import: it loads nothing but `re`.)
from tunnel.terminal.sanitize import printable

if TYPE_CHECKING:
    from tunnel.log.check import CheckReport
    from tunnel.log.item import Item
    from tunnel.log.ndjson import ExportSummary
    from tunnel.log.sqlite import SQLiteStore

# The items, the store and anyio are imported by the code that uses them, not here: every
# `tunnel` command imports this module to list its options.

__all__ = ["default_db_path", "log_app"]

T = TypeVar("T")


log_app = typer.Typer(
    name="log",
    help="Inspect, check, export and import the conversation log.",
    no_args_is_help=True,
    add_completion=False,
)

DbOption = Annotated[
    Path | None,
    typer.Option(
        "--db",
        envvar=DB_ENV_VAR,
        metavar="FILE",
        help="The log database.",
        show_default="<user data dir>/agent-tunnel/log.db",
        dir_okay=False,
    ),
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShowSettings:
    """What `tunnel log show` prints."""

    db: Path
    conversation_id: str
    after: int | None
    types: tuple[str, ...] | None
    limit: int


@log_app.command("list")
def list_command(db: DbOption = None) -> None:
    """List the conversations, most recently updated first."""
    from tunnel.log.item import format_time

    path = db or default_db_path()
    if not path.exists():
        typer.echo(f"no log database at {path} yet", err=True)
        return
    infos = _run(path, lambda store: store.list_conversations())
    if not infos:
        typer.echo("no conversations", err=True)
        return
    width = max(len("CONVERSATION"), *(len(info.conversation_id) for info in infos))
    typer.echo(f"{'CONVERSATION':<{width}}  {'ITEMS':>7}  UPDATED")
    for info in infos:
        updated = format_time(info.updated_at) if info.updated_at else "-"
        typer.echo(f"{printable(info.conversation_id):<{width}}  {info.item_count:>7}  {updated}")


@log_app.command("show")
def show_command(
    conversation_id: Annotated[
        str, typer.Argument(metavar="CONVERSATION", help="The conversation to show.")
    ],
    after: Annotated[
        int | None,
        typer.Option(metavar="SEQ", help="Show only items with a seq above this.", min=-1),
    ] = None,
    type_: Annotated[
        list[str] | None,
        typer.Option(
            "--type", metavar="TYPE", help="Show only items of this type (repeat for several)."
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option(metavar="N", help="Show at most this many items.", min=0)
    ] = 100,
    db: DbOption = None,
) -> None:
    """Print a conversation's items, oldest first."""
    from tunnel.log.item import CorruptItem

    settings = ShowSettings(
        db=db or default_db_path(),
        conversation_id=conversation_id,
        after=after,
        types=tuple(type_) if type_ else None,
        limit=limit,
    )
    items = show(settings)
    for item in items:
        typer.echo(render_item(item))
    _say_unreadable(sum(isinstance(item, CorruptItem) for item in items), "shown")


def show(settings: ShowSettings) -> list[Item]:
    """The items `tunnel log show` prints (exits with NOT_FOUND for an unknown conversation)."""
    _require_db(settings.db)

    async def read(store: SQLiteStore) -> list[Item]:
        if await store.get_conversation(settings.conversation_id) is None:
            _fail(f"no conversation {settings.conversation_id!r}")
        return await store.query(
            settings.conversation_id,
            after=settings.after,
            limit=settings.limit,
            types=settings.types,
        )

    return _run(settings.db, read)


@log_app.command("check")
def check_command(
    conversation_id: Annotated[
        str | None,
        typer.Argument(
            metavar="CONVERSATION",
            help="Check only this conversation (default: every one, and the whole file).",
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
) -> None:
    """Read every item and list what cannot be read or is missing, one problem per line.

    Exit status 0 when nothing is wrong, 5 when something is (the log stays readable: such
    items are shown and exported as placeholders of type `corrupt`).
    """
    path = db or default_db_path()
    _require_db(path)

    async def check(store: SQLiteStore) -> CheckReport:
        if conversation_id is not None and await store.get_conversation(conversation_id) is None:
            _fail(f"no conversation {conversation_id!r}")
        return await store.check(conversation_id, quick_check=conversation_id is None)

    report = _run(path, check)
    for problem in report.problems:
        typer.echo(printable(str(problem)))
    if report.problem_count > len(report.problems):
        typer.echo(f"... and {report.problem_count - len(report.problems)} more", err=True)
    checked = f"checked {report.items} items in {report.conversations} conversation(s)"
    if report.clean:
        typer.echo(f"{checked}: no problem found", err=True)
        return
    typer.echo(f"{checked}: {report.problem_count} problem(s)", err=True)
    raise typer.Exit(EXIT_CORRUPT)


@log_app.command("export")
def export_command(
    conversation_id: Annotated[
        str, typer.Argument(metavar="CONVERSATION", help="The conversation to export.")
    ],
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Write nothing and exit with 5 if an item cannot be read, instead of writing "
            "a placeholder of type corrupt for it.",
        ),
    ] = False,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            metavar="FILE",
            help="Write the conversation to FILE as one self-contained HTML page that shows it "
            "as the web page does, offline, with the host's signatures checked, instead of "
            "NDJSON to standard output.",
            dir_okay=False,
            show_default=False,
        ),
    ] = None,
    upto: Annotated[
        int | None,
        typer.Option(
            "--upto",
            metavar="SEQ",
            help="With --html: only the items up to this seq.",
            min=0,
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
) -> None:
    """Write a conversation to standard output as NDJSON, one item per line, or with --html to
    an HTML file.

    With --html the file is written even when the audit chain or a signature does not verify:
    the page says so at its top, and the exit status is 5.
    """
    from tunnel.log.ndjson import export_conversation

    if upto is not None and html is None:
        _fail("--upto needs --html")
    path = db or default_db_path()
    _require_db(path)
    if html is not None:
        _export_html(path, conversation_id, html, upto=upto, strict=strict)
        return
    out = typer.get_binary_stream("stdout")

    async def export(store: SQLiteStore) -> ExportSummary:
        if await store.get_conversation(conversation_id) is None:
            _fail(f"no conversation {conversation_id!r}")
        if strict:
            await _refuse_unreadable(store, conversation_id)
        return await export_conversation(store, conversation_id, out)

    summary = _run(path, export)
    typer.echo(f"exported {summary.items} items of {printable(conversation_id)}", err=True)
    _say_unreadable(summary.corrupt, "exported")


def _export_html(
    path: Path, conversation_id: str, file: Path, *, upto: int | None, strict: bool
) -> None:
    """`tunnel log export --html FILE`: the excerpt read, checked by verify, written as HTML."""
    import contextlib
    import os
    from datetime import UTC, datetime

    from tunnel.log.excerpt import Excerpt, read_excerpt
    from tunnel.log.item import CorruptItem
    from tunnel.relay.web.export import export_html

    if not file.parent.is_dir():
        _fail(f"cannot write {file}: its directory does not exist")

    async def read(store: SQLiteStore) -> Excerpt:
        if await store.get_conversation(conversation_id) is None:
            _fail(f"no conversation {conversation_id!r}")
        if strict:
            await _refuse_unreadable(store, conversation_id)
        return await read_excerpt(store, conversation_id, upto=upto)

    excerpt = _run(path, read)
    page = export_html(excerpt, exported_at=datetime.now(UTC))
    # Written beside the file, then renamed over it: a reader never sees half a page.
    partial = file.with_name(f".{file.name}.partial")
    try:
        partial.write_bytes(page)
        os.replace(partial, file)
    except OSError as exc:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        _fail(f"cannot write {file}: {exc.strerror or exc}")
    shown = (
        f"items {excerpt.items[0].seq}..{excerpt.items[-1].seq}" if excerpt.items else "no items"
    )
    typer.echo(f"wrote {file}: {shown} of {printable(conversation_id)}", err=True)
    _say_unreadable(sum(isinstance(item, CorruptItem) for item in excerpt.items), "exported")
    report = excerpt.report
    if excerpt.items and not report.ok:
        typer.echo(
            f"tunnel log: {file}: the audit chain does not verify ({report.problem_count} "
            f"problem(s), the first: {printable(report.problems[0])}); the page says so",
            err=True,
        )
        raise typer.Exit(EXIT_CORRUPT)


@log_app.command("import")
def import_command(
    file: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            help="An NDJSON file made by `tunnel log export`.",
            exists=True,
            dir_okay=False,
        ),
    ],
    db: DbOption = None,
) -> None:
    """Add the items of an NDJSON file; the whole file is checked first, then written at once.

    Each conversation in the file must continue exactly where the database stops (a new one at
    seq 0). On any problem nothing is written and the exit status is 2.
    """
    from tunnel.log.ndjson import ImportRejectedError, import_ndjson

    path = db or default_db_path()
    if db is None:
        path.parent.mkdir(parents=True, exist_ok=True)
    elif not path.parent.is_dir():
        # A mistyped --db should not grow directories; the default location may.
        _fail(f"the log's directory {path.parent} does not exist")
    try:
        summary = _run(path, lambda store: import_ndjson(store, file), readonly=False)
    except ImportRejectedError as exc:
        typer.echo(f"tunnel log: {file}: not imported, nothing was written:", err=True)
        for problem in exc.problems:
            typer.echo(f"  {printable(str(problem))}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    except OSError as exc:
        _fail(f"cannot read {file}: {exc.strerror or exc}")
    typer.echo(
        f"imported {summary.items} items in {len(summary.conversations)} conversation(s) "
        f"into {path}",
        err=True,
    )


@log_app.command("verify")
def verify_command(
    file: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            help="An NDJSON file made by `tunnel log export`.",
            dir_okay=False,
        ),
    ],
    host_id: Annotated[
        str | None,
        typer.Option(
            "--host-id",
            metavar="ID",
            help="The host that must have signed (its id, as in its links); default: report "
            "whichever host signed.",
            show_default=False,
        ),
    ] = None,
    all_signed: Annotated[
        bool,
        typer.Option(
            "--all-signed", help="Exit with 5 also when a signature does not cover every item."
        ),
    ] = False,
) -> None:
    """Check an export's audit chain and the host's signatures, offline.

    Names the first item that breaks the chain, and every signature that fails. Exit status 0
    when nothing is broken (items no signature covers are reported, not refused), 5 when
    something is, 2 when the file cannot be read.
    """
    import re

    from tunnel.log.verify import verify_lines

    if host_id is not None and re.fullmatch(r"[a-z2-7]{26}", host_id) is None:
        _fail(f"--host-id {host_id!r} is not a host id (26 characters of lowercase base32)")
    try:
        with file.open("rb") as lines:
            report = verify_lines(lines, host_id=host_id)
    except OSError as exc:
        _fail(f"cannot read {file}: {exc.strerror or exc}")
    for problem in report.problems:
        typer.echo(printable(problem))
    if report.problem_count > len(report.problems):
        typer.echo(f"... and {report.problem_count - len(report.problems)} more", err=True)
    for conversation in report.conversations.values():
        typer.echo(printable(conversation.summary()))
    if not report.ok:
        typer.echo(f"{file}: {report.problem_count} problem(s)", err=True)
        raise typer.Exit(EXIT_CORRUPT)
    if all_signed and not report.all_signed:
        typer.echo(f"{file}: not every item is signed", err=True)
        raise typer.Exit(EXIT_CORRUPT)
    typer.echo(f"{file}: verified", err=True)


@log_app.command("audit")
def audit_command(
    conversation_id: Annotated[
        str, typer.Argument(metavar="CONVERSATION", help="The conversation to audit.")
    ] = "main",
    db: DbOption = None,
) -> None:
    """Print, per turn, who asked for what, who decided each permission request and by which
    rule; then how far the host's signatures cover the conversation."""
    from tunnel.log.audit import Audit, chain_line
    from tunnel.log.item import CorruptItem

    path = db or default_db_path()
    _require_db(path)

    async def read(store: SQLiteStore) -> tuple[list[str], str, int]:
        if await store.get_conversation(conversation_id) is None:
            _fail(f"no conversation {conversation_id!r}")
        audit, items, after = Audit(), [], -1
        while page := await store.query(conversation_id, after=after, limit=1000):
            for item in page:
                audit.add(item)
            items += page
            after = page[-1].seq
        corrupt = sum(isinstance(item, CorruptItem) for item in items)
        chain = chain_line(items, await store.signatures(conversation_id), conversation_id)
        return audit.lines(), chain, corrupt

    lines, chain, corrupt = _run(path, read)
    for line in lines:
        typer.echo(printable(line))
    typer.echo(printable(chain))
    _say_unreadable(corrupt, "read")


def render_item(item: Item) -> str:
    """Two or more lines for a person: a header, then the text (or the data as JSON)."""
    import json

    from tunnel.log.item import CorruptItem, format_time

    status = f" [{item.status}]" if item.status else ""
    header = (
        f"#{item.seq}  {format_time(item.created_at)}  {printable(item.created_by)}  "
        f"{printable(item.type)}{printable(status)}"
    )
    text = item.data.get("text")
    if isinstance(item, CorruptItem):
        body = f"this item could not be read: {item.data['reason']}"
    elif isinstance(text, str):
        body = text
    else:
        body = json.dumps(item.data, ensure_ascii=False)
    return header + "\n" + "\n".join("    " + printable(line) for line in body.splitlines() or [""])


async def _refuse_unreadable(store: SQLiteStore, conversation_id: str) -> None:
    """`export --strict`: exit with 5, nothing written, if an item cannot be read."""
    report = await store.check(conversation_id, quick_check=False)
    if not report.clean:
        first = report.problems[0]
        _fail(
            f"not exported, nothing was written: {report.problem_count} problem(s), "
            f"the first {first}; `tunnel log check` lists them",
            EXIT_CORRUPT,
        )


def _require_db(path: Path) -> None:
    if not path.exists():
        _fail(f"no log database at {path}")


def _say_unreadable(count: int, done: str) -> None:
    if count:
        typer.echo(
            f"tunnel log: {count} item(s) could not be read and were {done} as placeholders "
            f"of type corrupt; `tunnel log check` lists them",
            err=True,
        )


def _run(path: Path, work: Callable[[SQLiteStore], Awaitable[T]], *, readonly: bool = True) -> T:
    """Run `work` on the store at `path`, read-only unless said; a store error is one line."""
    import anyio

    from tunnel.log.sqlite import SQLiteStore

    async def main() -> T:
        store = await SQLiteStore.open(path, readonly=readonly)
        try:
            return await work(store)
        finally:
            await store.aclose()

    try:
        return anyio.run(main)
    except StoreError as exc:
        _fail(str(exc))


def _fail(message: str, code: int = EXIT_CONFIG) -> NoReturn:
    """Say the user's mistake (a name, a file) in one line, as every command does, and exit."""
    typer.echo(f"tunnel log: {printable(message)}", err=True)
    raise typer.Exit(code)
