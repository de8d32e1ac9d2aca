"""Personal links through the commands: `tunnel host --invite`, the console's /invite, /people
and /revoke NAME, and `tunnel attach` with a personal link, all as real subprocesses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import RelayProcess
from tunnel.process.groups import unwrap_group
from tunnel.teammate.client import RevokedError, UnauthorizedError

from .conftest import wait_online
from .teammate import attached
from .test_host_and_attach_commands import _read_until, _start_host, _stop, prompt_from_attach

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


async def test_tunnel_attach_with_a_personal_link_is_shown_under_the_invited_name(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    host = _start_host(relay, tmp_path, workspace, "--no-interactive", "--invite", "alice:drive")
    try:
        link = (await _read_until(host, r"drive link for alice: (\S+)")).group(1)
        await prompt_from_attach(link, "mallory", shown_as="alice")
    finally:
        assert _stop(host) == 0
    # The same --invite after a restart keeps alice's link as it was.
    host = _start_host(relay, tmp_path, workspace, "--no-interactive", "--invite", "alice:drive")
    try:
        assert (await _read_until(host, r"drive link for alice: (\S+)")).group(1) == link
        await wait_online(link)
    finally:
        assert _stop(host) == 0


async def test_the_host_console_invites_lists_and_revokes_one_person(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    host = _start_host(relay, tmp_path, workspace, "--invite", "bob:view")
    try:
        assert host.stdin is not None
        bob_link = (await _read_until(host, r"view link for bob: (\S+)")).group(1)
        host.stdin.write(b"/invite carol drive\n")
        host.stdin.flush()
        carol_link = (await _read_until(host, r"drive link for carol: (\S+)")).group(1)
        await wait_online(carol_link)

        async def cut_off() -> None:
            async with unwrap_group(), attached(carol_link, "someone") as carol:
                await carol.wait_for(lambda t: t.snapshot_done)
                host.stdin.write(b"/people\n")
                host.stdin.flush()
                # Who is attached first (the console and carol), then every invitation.
                await _read_until(host, r"attached: .* \(host\), carol \(drive\)\n")
                await _read_until(host, r"bob \(view\): never seen")
                await _read_until(host, r"carol \(drive\): attached")
                host.stdin.write(b"/revoke carol\n")
                host.stdin.flush()
                await carol.wait_for(lambda t: False, within=20)

        with pytest.raises(RevokedError):
            await cut_off()
        await _read_until(host, r"carol's link revoked")
        with pytest.raises(UnauthorizedError):
            async with unwrap_group(), attached(carol_link, "someone") as again:
                await again.wait_for(lambda t: t.ready is not None)
        await wait_online(bob_link)
    finally:
        assert _stop(host) == 0
