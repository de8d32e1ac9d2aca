"""Personal links: a person invited by name and role, with a secret of their own.

Each invitation has its own 32-byte secret, so its own relay verifier and its own e2e root
(docs/security.md, "Personal links"); its link has the format of a role link. The invitations
are kept in a file beside the key (mode 0600, written atomically), never in the log. A replay
link is one too, of role `view`, that also carries what it may show (`ReplayLink`,
tunnel/host/replay_link.py), kept in the same file only.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from tunnel.e2e.crypto import (
    ROLES,
    ShareLink,
    b64url_decode,
    b64url_encode,
    e2e_root,
    new_secret,
    relay_token,
    share_link,
    token_verifier,
)
from tunnel.e2e.identity import KeyFileError, read_private_file, write_private_file
from tunnel.handshake import MAX_INVITATIONS, Invited
from tunnel.host.replay_link import REPLAY_PREFIX, ReplayLink, replay_name

__all__ = ["Invitation", "InvitationError", "Invitations", "parse_invite"]

_FORMAT: Final = "agent-tunnel invitations v1"
_FORMAT_REPLAYS: Final = "agent-tunnel invitations v2"
"""The format of a file that holds a replay link: a host that predates them refuses the file
rather than take a replay link for a view link of the whole session."""

_NAME = re.compile(r"[\w.-]{1,64}")
"""A person's name: letters, digits, `_`, `.` and `-`, so it is one word at the console and in
`--invite NAME:ROLE`, and prints the same everywhere."""


class InvitationError(ValueError):
    """An invitation that cannot be made or found; the message is one line for the user."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Invitation:
    """One person's link: who, in which role, with which secret."""

    name: str
    """The person's name, shown for everything they do whatever name their client sends."""

    role: str
    """"view" or "drive"."""

    secret: bytes = field(repr=False)
    """Their link's 32 random bytes."""

    created: float
    """When the host invited them (seconds since the epoch)."""

    last_seen: float | None = None
    """When a channel of theirs last closed (seconds since the epoch), None if never."""

    replay: ReplayLink | None = None
    """For a replay link, the conversation and the seqs it shows; None for a person's link."""

    def __post_init__(self) -> None:
        if self.replay is not None and self.role != "view":
            raise ValueError("a replay link only views")

    def verifier(self, host_id: str) -> bytes:
        """What the relay matches their token against."""
        return token_verifier(relay_token(self.secret, host_id))

    def root(self, host_id: str) -> bytes:
        """The e2e root their channels' opening proves and their keys are made with."""
        return e2e_root(self.secret, host_id)

    def link(self, relay_url: str, host_id: str) -> ShareLink:
        """Their personal link (the format of a role link)."""
        return share_link(relay_url, host_id, self.role, self.secret)


def check_person(name: str) -> str:
    """Return `name` if it can name an invited person; InvitationError otherwise."""
    if not _NAME.fullmatch(name):
        raise InvitationError(
            f"{name!r} is not a name to invite: use 1 to 64 letters, digits, '_', '.' or '-'"
        )
    return name


def parse_invite(value: str) -> tuple[str, str]:
    """Parse `NAME:ROLE` (as `tunnel host --invite` takes it); InvitationError if malformed."""
    name, sep, role = value.partition(":")
    if not sep:
        raise InvitationError(f"--invite {value!r}: expected NAME:ROLE, e.g. alice:drive")
    if role not in ROLES:
        raise InvitationError(f"--invite {value!r}: the role is one of {', '.join(ROLES)}")
    return check_person(name), role


class Invitations:
    """The host's invitations, in the order they were made, saved at `path` on every change."""

    def __init__(self, path: Path, invitations: list[Invitation] | None = None) -> None:
        self.path = path
        self._by_name: dict[str, Invitation] = {i.name: i for i in invitations or ()}

    @classmethod
    def load(cls, path: Path) -> Invitations:
        """Load the invitations at `path` (none if there is no file yet).

        Raises KeyFileError if the file is readable by group or others, or is corrupt.
        """
        path = Path(path)
        if not path.exists():
            return cls(path)
        data = read_private_file(path)
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict) or doc.get("format") not in (_FORMAT, _FORMAT_REPLAYS):
                raise ValueError("unknown format")
            invitations = [
                Invitation(
                    name=check_person(entry["name"]),
                    role=_role(entry["role"]),
                    secret=_secret(entry["secret"]),
                    created=float(entry["created"]),
                    last_seen=_time(entry.get("last_seen")),
                    replay=_replay(entry.get("replay")),
                )
                for entry in doc["invitations"]
            ]
        except (ValueError, KeyError, TypeError):
            raise KeyFileError(
                f"{path} is not a valid invitations file; delete it to drop every personal link"
            ) from None
        return cls(path, invitations)

    def all(self) -> list[Invitation]:
        """Every invitation, oldest first."""
        return list(self._by_name.values())

    def get(self, name: str) -> Invitation | None:
        """The invitation of `name`, or None."""
        return self._by_name.get(name)

    def has_name(self, name: str) -> bool:
        """Whether `name` is an invited person's, ignoring case (so "Alice" is alice's too)."""
        folded = name.casefold()
        return any(folded == other.casefold() for other in self._by_name)

    def add(self, name: str, role: str) -> Invitation:
        """Invite `name` in `role` with a fresh secret and save; an existing invitation of that
        name is replaced (its old link stops working). InvitationError if the name is not one,
        the role unknown, or the host has MAX_INVITATIONS already."""
        check_person(name)
        if name.casefold().startswith(REPLAY_PREFIX):
            raise InvitationError(f"names starting with {REPLAY_PREFIX!r} are replay links'")
        if role not in ROLES:
            raise InvitationError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
        invitation = Invitation(name=name, role=role, secret=new_secret(), created=time.time())
        return self._put(invitation)

    def add_replay(self, replay: ReplayLink) -> Invitation:
        """A replay link of `replay` (role `view`, a fresh secret, named
        `replay-<conversation>-<n>`), saved; InvitationError if the host has MAX_INVITATIONS
        links already."""
        name = replay_name(replay.conversation, {n.casefold() for n in self._by_name})
        invitation = Invitation(
            name=name, role="view", secret=new_secret(), created=time.time(), replay=replay
        )
        return self._put(invitation)

    def _put(self, invitation: Invitation) -> Invitation:
        name = invitation.name
        if name not in self._by_name and len(self._by_name) >= MAX_INVITATIONS:
            raise InvitationError(
                f"a host has at most {MAX_INVITATIONS} personal links; revoke one first"
            )
        self._by_name.pop(name, None)
        self._by_name[name] = invitation
        self.save()
        return invitation

    def ensure(self, name: str, role: str) -> Invitation:
        """`name`'s invitation in `role`: the one there is (its link unchanged, as across
        restarts), or a new one (`add`) if there is none or it is of another role."""
        found = self._by_name.get(name)
        if found is not None and found.role == role:
            return found
        return self.add(name, role)

    def ensure_all(self, wanted: Sequence[tuple[str, str]]) -> None:
        """`ensure` each (name, role) of `wanted`; InvitationError, before anything is changed,
        if they would make more than MAX_INVITATIONS."""
        names = set(self._by_name) | {name for name, _ in wanted}
        if len(names) > MAX_INVITATIONS:
            raise InvitationError(
                f"--invite: a host has at most {MAX_INVITATIONS} personal links"
                f" ({len(names)} asked, with those kept from before)"
            )
        for name, role in wanted:
            self.ensure(name, role)

    def seen(self, name: str, when: float) -> None:
        """Note that a channel of `name`'s closed at `when`, and save (nothing if revoked)."""
        invitation = self._by_name.get(name)
        if invitation is not None:
            self._by_name[name] = replace(invitation, last_seen=when)
            self.save()

    def remove(self, name: str) -> Invitation:
        """Revoke `name`'s invitation and save; InvitationError if there is none."""
        invitation = self._by_name.pop(name, None)
        if invitation is None:
            raise InvitationError(f"nobody is invited as {name!r}")
        self.save()
        return invitation

    def registered(self, host_id: str) -> tuple[Invited, ...]:
        """The verifiers the host registers with the relay (roles and verifiers, no names)."""
        return tuple(Invited(role=i.role, verifier=i.verifier(host_id)) for i in self.all())

    def by_verifier(self, verifier: bytes, host_id: str) -> Invitation | None:
        """The invitation whose verifier is `verifier`, or None (revoked, or never made)."""
        for invitation in self.all():
            if invitation.verifier(host_id) == verifier:
                return invitation
        return None

    def save(self) -> None:
        """Write every invitation to `path` (mode 0600, atomically replacing what was there)."""
        replays = any(i.replay is not None for i in self.all())
        doc = {
            "format": _FORMAT_REPLAYS if replays else _FORMAT,
            "invitations": [
                {
                    "name": i.name,
                    "role": i.role,
                    "secret": b64url_encode(i.secret),
                    "created": i.created,
                    **({} if i.last_seen is None else {"last_seen": i.last_seen}),
                    **({} if i.replay is None else {"replay": i.replay.wire()}),
                }
                for i in self.all()
            ],
        }
        write_private_file(self.path, (json.dumps(doc, indent=2) + "\n").encode(), overwrite=True)


def _role(value: object) -> str:
    if value not in ROLES:
        raise ValueError("unknown role")
    assert isinstance(value, str)
    return value


def _time(value: object) -> float | None:
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError("not a time")
    return float(value)


def _replay(value: object) -> ReplayLink | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("not a replay")
    return ReplayLink(conversation=value["conversation"], upto=value["upto"])


def _secret(value: object) -> bytes:
    if not isinstance(value, str):
        raise ValueError("not a secret")
    secret = b64url_decode(value)
    if len(secret) != 32:
        raise ValueError("not a secret")
    return secret
