"""The agent's questions in `tunnel attach`, for real: a relay, a host sharing the fake ACP agent,
and attach on an emulated terminal. The question is shown numbered; `/answer` answers it; an
answer that does not fit is refused by the host and the question stays open."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import RelayProcess

from .test_attach_notifications import _attach, _drive_link, _host


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_attach_shows_the_question_and_answer_sends_the_typed_values(
    relay: RelayProcess, tmp_path: Path
) -> None:
    with _host(relay, tmp_path) as host:
        link = await _drive_link(host)
        with _attach(link, "alice") as alice:
            await alice.wait_screen(r"attached as alice \(drive\)")
            alice.keys(b"elicit\r")
            await alice.wait_screen(r"question\? Pick")
            await alice.wait_screen(r"^\[1 waiting\] >$", where="cursor")
            await alice.wait_screen(r"2\. Color \(one of: 1 r \(Red\), 2 g \(Green\), required\)")
            # Not one of its choices: the host refuses, the question stays open.
            alice.keys(b"/answer 1=ann 2=blue\r")
            await alice.wait_screen(r"color.*expected one of its choices")
            alice.keys(b"/answer 1='Ann Lee' 2=Green 3=4 4=yes\r")
            await alice.wait_screen(r"alice answered: name=Ann Lee, color=g, count=4, urgent=yes")
            await alice.wait_screen(
                r'answered accept \{"color": "g", "count": 4, "name": "Ann Lee", "urgent": true\}'
            )
            alice.keys(b"/answer decline\r")
            await alice.wait_screen(r"no question is waiting")
            alice.keys(b"\x04")
            assert await alice.wait_exit() == 0


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_attach_completes_an_at_path_from_the_hosts_workspace(
    relay: RelayProcess, tmp_path: Path
) -> None:
    with _host(relay, tmp_path) as host:
        link = await _drive_link(host)
        with _attach(link, "alice") as alice:
            await alice.wait_screen(r"attached as alice \(drive\)")
            alice.keys(b"context @no\t")  # the host is asked; its answer opens the menu
            await alice.wait_screen(r"@notes\.txt", where="display")
            alice.keys(b"\t")
            await alice.wait_screen(r"^> context @notes\.txt$", where="cursor")
            alice.keys(b"\r")
            await alice.wait_screen(r"embedded file://\S+/notes\.txt: milk")
