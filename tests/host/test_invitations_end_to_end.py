"""Personal links end to end: a relay subprocess, a sharing host, Python teammates.

The invited name is the one everyone sees, whatever name the client sends; revoking one person
ends their link and channels only; an invitation survives a host restart (docs/security.md,
"Personal links").
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio
import pytest

from tests.support import RelayProcess, attach_and_echo, host_settings, running_host
from tunnel.app.requests import Prompt
from tunnel.e2e.crypto import ShareLink
from tunnel.host.console import PeopleControl
from tunnel.teammate.client import (
    HostGoneError,
    RevokedError,
    TeammateSession,
    UnauthorizedError,
    connect_teammate,
)

from .conftest import sharing, wait_online
from .teammate import attached

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def people(control: PeopleControl | None) -> PeopleControl:
    assert control is not None
    return control


async def read_until_closed(session: TeammateSession) -> None:
    while True:
        await session.receive()


async def attach_once(link: str) -> None:
    async with connect_teammate(link, name="again") as session:
        await session.subscribe()
        await session.receive()


async def test_a_personal_link_shows_the_invited_name_whatever_name_the_client_sends(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    async with sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared:
        link = await people(shared.console.people).invite("alice", "drive")
        assert ShareLink.parse(link).role == "drive"
        async with (
            attached(link, "mallory") as alice,
            attached(shared.host.drive_link, "bob") as bob,
        ):
            await alice.wait_for(lambda t: t.ready is not None)
            await bob.wait_for(lambda t: t.ready is not None)
            assert alice.ready is not None
            assert bob.ready is not None
            assert (alice.ready["name"], alice.ready.get("verified")) == ("alice", True)
            # A role link's holder keeps the name they typed, and it is not marked verified.
            assert (bob.ready["name"], bob.ready.get("verified")) == ("bob", None)

            def both_listed(t: object) -> bool:
                names = {m.name for m in bob.session.members}
                return {"alice", "bob"} <= names

            await bob.wait_for(both_listed)
            listed = {m.name: m.verified for m in bob.session.members if m.role != "host"}
            assert listed == {"alice": True, "bob": False}
            assert "mallory" not in {m.name for m in alice.session.members}

            await alice.send(Prompt(text="hello from alice"))
            await bob.wait_for(
                lambda t: t.item_of("message", role="user", text="hello from alice") is not None
            )
            item = bob.item_of("message", role="user", text="hello from alice")
            assert item is not None
            assert item["created_by"] == "alice"


async def test_revoking_one_person_ends_their_link_only(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    async with sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared:
        control = people(shared.console.people)
        alice_link = await control.invite("alice", "drive")
        bob_link = await control.invite("bob", "drive")
        async with attached(bob_link, "bob") as bob:
            async with connect_teammate(alice_link, name="alice") as alice:
                await alice.subscribe()
                await control.revoke("alice")
                with pytest.raises(RevokedError), anyio.fail_after(30):
                    await read_until_closed(alice)
            # Bob's channel, the same one, keeps working after alice is gone.
            await bob.send(Prompt(text="still here"))
            await bob.wait_for(
                lambda t: t.item_of("message", role="user", text="still here") is not None
            )
            item = bob.item_of("message", role="user", text="still here")
            assert item is not None
            assert item["created_by"] == "bob"
            assert control.listing()[0].startswith("bob (drive): attached")
        # Alice's link is refused at the relay (4002); bob's still opens a channel.
        with pytest.raises(UnauthorizedError), anyio.fail_after(20):
            await attach_once(alice_link)
        await wait_online(bob_link)
        assert [line.split(" ")[0] for line in control.listing()] == ["bob"]


async def test_an_invitation_survives_a_host_restart(relay: RelayProcess, tmp_path: Path) -> None:
    settings = host_settings(relay.url, tmp_path)
    async with running_host(settings) as host:
        link = await host.invite("carol", "view")
        assert await attach_and_echo(link) == b"ping"
    stored = settings.resolved_invitations_file
    assert stored.stat().st_mode & 0o777 == 0o600
    assert "carol" in stored.read_text()
    async with running_host(settings) as again:
        assert [i.name for i in again.invitations.all()] == ["carol"]
        assert again.link_of(again.invitations.all()[0]) == link
        assert await attach_and_echo(link) == b"ping"


async def test_a_revoked_personal_link_is_refused_with_4002_and_its_channel_closed_with_4008(
    relay: RelayProcess, tmp_path: Path
) -> None:
    async with running_host(host_settings(relay.url, tmp_path)) as host:
        link = await host.invite("dave", "drive")
        async with connect_teammate(link, name="dave") as session:
            await session.send(b"ping")
            assert await session.receive_plaintext() == b"ping"
            await host.revoke_person("dave")
            with pytest.raises(RevokedError) as closed, anyio.fail_after(20):
                await session.receive_plaintext()
            assert closed.value.code == 4008
        with pytest.raises(UnauthorizedError) as refused, anyio.fail_after(20):
            await attach_and_echo(link)
        assert refused.value.code == 4002


async def test_rotating_the_role_links_leaves_personal_links_valid(
    relay: RelayProcess, tmp_path: Path
) -> None:
    async with running_host(host_settings(relay.url, tmp_path)) as host:
        personal = await host.invite("erin", "drive")
        old = host.drive_link
        await host.revoke()
        # The new verifiers are in force once the host's new connection is admitted.
        for _ in range(100):
            with contextlib.suppress(UnauthorizedError, HostGoneError):
                assert await attach_and_echo(host.drive_link) == b"ping"
                break
            await anyio.sleep(0.1)
        else:
            raise AssertionError("the new drive link was never accepted")
        assert await attach_and_echo(personal) == b"ping"
        with pytest.raises(UnauthorizedError), anyio.fail_after(20):
            await attach_and_echo(old)
