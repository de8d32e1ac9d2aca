"""Personal links without a network: the stored file, the names and roles accepted, the limit,
and an open whose `peer` names the wrong personal link (docs/security.md, "Personal links")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support import open_meta
from tunnel.e2e.crypto import ShareSecrets, e2e_root
from tunnel.e2e.identity import HostIdentity, KeyFileError
from tunnel.handshake import MAX_INVITATIONS, HelloError, parse_registration, registration
from tunnel.host.channel import ChannelRefusedError, HostChannel, open_host_channel
from tunnel.host.invitations import InvitationError, Invitations, parse_invite
from tunnel.proto import DEFAULT_LIMITS, Limits
from tunnel.proto.codes import CloseCode


def test_invitations_are_stored_private_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "share_secrets.invitations"
    invitations = Invitations.load(path)
    alice = invitations.add("alice", "drive")
    invitations.add("bob", "view")
    assert path.stat().st_mode & 0o777 == 0o600
    again = Invitations.load(path)
    assert [(i.name, i.role) for i in again.all()] == [("alice", "drive"), ("bob", "view")]
    assert again.get("alice") == alice
    # The same name and role keep their link; another role gets a new one.
    assert again.ensure("alice", "drive") == alice
    assert again.ensure("alice", "view").secret != alice.secret
    again.seen("alice", 1234.5)
    assert Invitations.load(path).get("alice").last_seen == 1234.5  # type: ignore[union-attr]
    again.remove("bob")
    assert [i.name for i in Invitations.load(path).all()] == ["alice"]


def test_a_corrupt_or_readable_invitations_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "invitations"
    path.write_text('{"format": "something else"}')
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match="not a valid invitations file"):
        Invitations.load(path)
    Invitations(path).add("alice", "drive")
    path.chmod(0o644)
    with pytest.raises(KeyFileError):
        Invitations.load(path)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("alice", "expected NAME:ROLE"),
        ("alice:admin", "the role is one of view, drive"),
        (":drive", "not a name to invite"),
        ("al ice:drive", "not a name to invite"),
        ("a" * 65 + ":view", "not a name to invite"),
    ],
)
def test_a_malformed_invite_says_what_is_wrong(value: str, message: str) -> None:
    with pytest.raises(InvitationError, match=message):
        parse_invite(value)


def test_a_host_has_at_most_the_relays_number_of_personal_links(tmp_path: Path) -> None:
    invitations = Invitations(tmp_path / "invitations")
    for n in range(MAX_INVITATIONS):
        invitations.add(f"p{n}", "view")
    with pytest.raises(InvitationError, match=f"at most {MAX_INVITATIONS} personal links"):
        invitations.add("one-more", "view")
    # Inviting someone again replaces their link: no new slot needed.
    invitations.add("p0", "drive")


def test_the_relay_refuses_a_registration_over_the_limit_or_with_equal_verifiers() -> None:
    roles = {"view": bytes([1]) * 32, "drive": bytes([2]) * 32}
    invited = [{"role": "view", "verifier": bytes([n]) * 32} for n in range(3, 3 + 33)]
    with pytest.raises(HelloError) as over:
        parse_registration({"verifiers": roles, "invited": invited})
    assert over.value.code == CloseCode.LIMIT_REACHED
    with pytest.raises(HelloError) as equal:
        parse_registration(
            {"verifiers": roles, "invited": [{"role": "view", "verifier": roles["view"]}]}
        )
    assert equal.value.code == CloseCode.PROTOCOL_ERROR
    verifiers, parsed = parse_registration({**registration(roles), "invited": invited[:2]})
    assert verifiers == roles
    assert [i.verifier for i in parsed] == [bytes([3]) * 32, bytes([4]) * 32]


@dataclass
class FakeLinkChannel:
    """What `open_host_channel` reads of a channel the relay opened."""

    path: str
    meta: dict[str, Any] = field(default_factory=dict)
    limits: Limits = DEFAULT_LIMITS


def test_an_open_is_bound_to_a_person_by_its_proof_never_by_the_relays_word(
    tmp_path: Path,
) -> None:
    identity = HostIdentity.load_or_create(tmp_path / "host_key")
    invitations = Invitations(tmp_path / "invitations")
    alice, bob = invitations.add("alice", "drive"), invitations.add("bob", "drive")
    host_id = identity.host_id
    link = alice.link("http://127.0.0.1:1", host_id)

    def invitation_of(verifier: bytes) -> tuple[str, str, bytes] | None:
        found = invitations.by_verifier(verifier, host_id)
        return None if found is None else (found.name, found.role, found.root(host_id))

    def open_with(peer: dict[str, Any]) -> Any:
        meta = {**open_meta(link, "typed-name"), "peer": peer}
        return open_host_channel(
            FakeLinkChannel(path="session", meta=meta),  # type: ignore[arg-type]
            identity=identity,
            root_of=lambda role: bytes(32),
            paths=frozenset({"session"}),
            invitation_of=invitation_of,
        )

    channel = open_with({"name": "x", "role": "drive", "invitation": alice.verifier(host_id)})
    assert (channel.name, channel.person, channel.verified) == ("alice", "alice", True)
    cases: list[tuple[dict[str, Any], int]] = [
        # The relay names bob's link for alice's token: bob's root does not verify the proof.
        ({"role": "drive", "invitation": bob.verifier(host_id)}, CloseCode.DECRYPTION_FAILED),
        # The relay says it was a role link: the role's root does not verify it either.
        ({"role": "drive"}, CloseCode.DECRYPTION_FAILED),
        # A personal link the host does not know (revoked).
        ({"role": "drive", "invitation": bytes(32)}, CloseCode.REVOKED),
        ({"role": "drive", "invitation": "text"}, CloseCode.PROTOCOL_ERROR),
    ]
    for peer, code in cases:
        with pytest.raises(ChannelRefusedError) as refused:
            open_with(peer)
        assert refused.value.code == code, peer


def test_a_role_links_open_under_an_invited_name_is_refused_once_its_proof_holds(
    tmp_path: Path,
) -> None:
    identity = HostIdentity.load_or_create(tmp_path / "host_key")
    secrets = ShareSecrets.generate()
    invitations = Invitations(tmp_path / "invitations")
    invitations.add("alice", "drive")
    link = secrets.link("drive", "http://127.0.0.1:1", identity.host_id)

    def open_as(name: str, root_of: Callable[[str], bytes]) -> HostChannel:
        meta = {**open_meta(link, name), "peer": {"name": name, "role": "drive"}}
        return open_host_channel(
            FakeLinkChannel(path="session", meta=meta),  # type: ignore[arg-type]
            identity=identity,
            root_of=root_of,
            paths=frozenset({"session"}),
            invited=invitations.has_name,
        )

    def role_root(role: str) -> bytes:
        return e2e_root(secrets.secret_for(role), identity.host_id)

    for name in ("alice", "ALICE"):
        with pytest.raises(ChannelRefusedError) as refused:
            open_as(name, role_root)
        assert refused.value.code == CloseCode.REFUSED
    # Without the role's secret, the proof fails first: no name is said to be invited.
    with pytest.raises(ChannelRefusedError) as unproven:
        open_as("alice", lambda role: bytes(32))
    assert unproven.value.code == CloseCode.DECRYPTION_FAILED
    channel = open_as("bob", role_root)
    assert (channel.name, channel.verified) == ("bob", False)
