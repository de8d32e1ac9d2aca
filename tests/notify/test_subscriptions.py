"""Push subscriptions: kept per person in a private file, bounded, and dropped on revoke."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import anyio
import pytest

from tests.notify.push_keys import BrowserKeys
from tunnel.e2e.identity import KeyFileError, write_private_file
from tunnel.notify import subscriptions
from tunnel.notify.subscriptions import (
    MAX_PER_OWNER,
    Owner,
    Refused,
    Subscription,
    Subscriptions,
)

ALICE = Owner(kind="person", id="alice")
BROWSER = Owner(kind="browser", id="b" * 20)


def sub(owner: Owner, n: int, role: str = "drive") -> Subscription:
    return Subscription(
        owner=owner,
        endpoint=f"https://fcm.googleapis.com/fcm/send/{owner.id}-{n}",
        p256dh=BrowserKeys().public,
        auth=os.urandom(16),
        role=role,
        browser="c" * 20,
    )


def test_subscriptions_survive_a_restart_in_a_private_file(tmp_path: Path) -> None:
    path = tmp_path / "host_key.push"
    held = Subscriptions.load(path)
    assert path.exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    held.add(sub(ALICE, 1))
    held.add(sub(BROWSER, 1, role="view"))
    again = Subscriptions.load(path)
    assert again.all() == held.all()
    path.chmod(0o644)
    with pytest.raises(KeyFileError):
        Subscriptions.load(path)


def test_one_owner_keeps_at_most_a_few_and_the_oldest_goes() -> None:
    held = Subscriptions()
    for n in range(MAX_PER_OWNER + 2):
        held.add(sub(ALICE, n))
    endpoints = [s.endpoint for s in held.all()]
    assert len(endpoints) == MAX_PER_OWNER
    assert endpoints[0].endswith("alice-2")


def test_an_endpoint_another_owner_holds_is_refused() -> None:
    held = Subscriptions()
    mine = sub(ALICE, 1)
    held.add(mine)
    theirs = Subscription(
        owner=BROWSER,
        endpoint=mine.endpoint,
        p256dh=mine.p256dh,
        auth=mine.auth,
        role="drive",
        browser="x" * 20,
    )
    with pytest.raises(Refused, match="someone else"):
        held.add(theirs)
    assert not held.remove(mine.endpoint, owner=BROWSER)
    assert held.get(mine.endpoint) == mine


def test_revoking_drops_the_persons_or_the_role_links_subscriptions() -> None:
    held = Subscriptions()
    held.add(sub(ALICE, 1))
    held.add(sub(Owner(kind="person", id="bob"), 1))
    held.add(sub(BROWSER, 1))
    assert held.remove_person("alice") == 1
    assert held.remove_role_links() == 1
    assert [s.owner.id for s in held.all()] == ["bob"]


def test_a_damaged_file_drops_only_what_does_not_read(tmp_path: Path) -> None:
    path = tmp_path / "push"
    held = Subscriptions.load(path)
    held.add(sub(ALICE, 1))
    text = path.read_text()
    path.write_text(text.replace("[", '[{"owner_kind": "person"},', 1))
    assert len(Subscriptions.load(path)) == 1


@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_a_running_host_writes_in_a_worker_thread_and_a_revocation_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "host_key.push"
    held = Subscriptions.load(path, save_interval=3600)
    loop_thread = threading.get_ident()
    in_loop: list[bool] = []

    def write(target: Path, data: bytes, *, overwrite: bool) -> None:
        in_loop.append(threading.get_ident() == loop_thread)
        write_private_file(target, data, overwrite=overwrite)

    monkeypatch.setattr(subscriptions, "write_private_file", write)
    browser = sub(BROWSER, 1)
    async with anyio.create_task_group() as tg:
        await tg.start(held.run)
        held.add(sub(ALICE, 1))  # saved: the first change
        held.add(browser)  # held back: within the interval
        held.remove_person("alice")  # saved at once, with the change held back
        with anyio.fail_after(10):
            await held.saved()
        assert Subscriptions.load(path).all() == [browser]
        tg.cancel_scope.cancel()
    assert in_loop
    assert not any(in_loop)
    # Stopped: a save is written at once again.
    held.remove_role_links()
    assert Subscriptions.load(path).all() == []
