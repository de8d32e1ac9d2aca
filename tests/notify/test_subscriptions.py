"""Push subscriptions: kept per person in a private file, bounded, and dropped on revoke."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.notify.push_keys import BrowserKeys
from tunnel.e2e.identity import KeyFileError
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
