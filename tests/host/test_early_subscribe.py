"""Attaching in one round trip: the `open` carries the subscribe, the host's first answer the
snapshot and the `broadcast` message (docs/protocol.md, "Application messages"), and a relay that
replays such an open gets nothing it can read and shows nobody (docs/security.md, "Opening a
channel"). A relay subprocess and a sharing host on loopback."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.support import RelayProcess
from tunnel.app.follower import (
    Following,
    Presence,
    SnapshotPage,
    SnapshotStarted,
    State,
)
from tunnel.app.host_messages import Ready
from tunnel.e2e.crypto import e2e_root
from tunnel.e2e.opening import ANSWER_SIZE, EarlySubscribe, OpeningError, TeammateOpening
from tunnel.handshake import teammate_hello
from tunnel.link import ChannelClosedError, DialSettings, dial
from tunnel.proto.codes import CloseCode
from tunnel.teammate.client import connect_teammate

from .conftest import sharing

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_an_open_with_its_subscribe_is_followed_and_shown_without_another_request(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    async with sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared:
        link = shared.host.view_link
        kinds: list[type] = []
        with anyio.fail_after(30):
            async with connect_teammate(
                link, name="early", subscribe=EarlySubscribe(tail=5)
            ) as session:
                # No subscribe() here: the open said it.
                while not (
                    session.you is not None and any(m.id == session.you for m in session.members)
                ):
                    event = await session.receive()
                    kinds.append(type(event))
                assert session.follower.state is State.BROADCAST
                assert [m.name for m in session.members if m.id == session.you] == ["early"]
                assert "early" in {m.name for m in shared.presence.members()}
        first = [kind for kind in kinds if kind is not Presence]
        assert first[:3] == [Ready, SnapshotStarted, SnapshotPage]
        assert Following in first


async def test_an_early_cursor_of_another_conversation_gets_a_fresh_snapshot(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    async with sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared:
        early = EarlySubscribe(after=0, conversation="another log")
        with anyio.fail_after(30):
            async with connect_teammate(
                shared.host.view_link, name="stale", subscribe=early
            ) as session:
                while not isinstance(event := await session.receive(), SnapshotStarted):
                    pass
                assert event.reset
                assert event.fresh


async def test_a_replayed_open_gets_an_answer_it_cannot_use_and_shows_nobody(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    async with sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared:
        link = shared.host.view_link
        root = e2e_root(link.secret, link.host_id)
        recorded = TeammateOpening(
            root=root,
            host_id=link.host_id,
            role=link.role,
            name="alice",
            subscribe=EarlySubscribe(),
        )
        meta = recorded.meta()  # what a relay saw go by; the private key never leaves alice

        def hello(_relay: object) -> dict[str, object]:
            return teammate_hello(host_id=link.host_id, token=link.token, name="alice")

        answers: list[bytes] = []
        with anyio.fail_after(30):
            for _replay in range(2):
                async with dial(relay.url, "/v1/attach", hello, DialSettings(), backlog=1) as mux:
                    channel = mux.open_channel("session", dict(meta))
                    answer = await channel.receive()
                    assert len(answer) == ANSWER_SIZE
                    answers.append(answer)
                    # The host streams what the open asked for: ready, the snapshot, ...
                    sealed = [await channel.receive() for _ in range(3)]
                    # ... under keys that need the ephemeral private key behind `kx`: another
                    # key of the replayer's cannot even check the answer.
                    replay = TeammateOpening(
                        root=root,
                        host_id=link.host_id,
                        role=link.role,
                        name="alice",
                        salt=recorded.offer.salt,
                        subscribe=EarlySubscribe(),
                    )
                    with pytest.raises(OpeningError):
                        replay.finish(answer)
                    assert all(len(message) > 0 for message in sealed)
                    # Never confirmed, so never shown.
                    assert "alice" not in {m.name for m in shared.presence.members()}
        # A fresh host key share each time: one replay's keys are not another's.
        assert answers[0] != answers[1]


async def test_a_replayed_open_that_never_confirms_is_ended_by_the_host(
    relay: RelayProcess, tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tunnel.host.session.CONFIRMATION_TIMEOUT", 0.5)
    async with sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared:
        link = shared.host.view_link
        root = e2e_root(link.secret, link.host_id)
        recorded = TeammateOpening(
            root=root,
            host_id=link.host_id,
            role=link.role,
            name="alice",
            subscribe=EarlySubscribe(),
        )

        def hello(_relay: object) -> dict[str, object]:
            return teammate_hello(host_id=link.host_id, token=link.token, name="alice")

        with anyio.fail_after(30):
            async with dial(relay.url, "/v1/attach", hello, DialSettings(), backlog=1) as mux:
                channel = mux.open_channel("session", dict(recorded.meta()))

                # The replayer reads what the host streams and never sends the confirmation:
                # the host ends the channel rather than keep its seat in the broadcast.
                async def read_until_closed() -> None:
                    while True:
                        await channel.receive()

                with pytest.raises(ChannelClosedError):
                    await read_until_closed()
        assert "alice" not in {m.name for m in shared.presence.members()}


@pytest.mark.parametrize(
    "sub",
    [None, {"after": 0}, {"tail": 1}, {"after": 5, "conversation": "c-1"}],
    ids=["dropped", "after", "tail", "conversation"],
)
async def test_an_early_subscribe_a_relay_changed_fails_the_open(
    relay: RelayProcess, tmp_path: Path, workspace: Path, sub: dict[str, object] | None
) -> None:
    async with sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared:
        link = shared.host.view_link
        genuine = TeammateOpening(
            root=e2e_root(link.secret, link.host_id),
            host_id=link.host_id,
            role=link.role,
            name="alice",
            subscribe=EarlySubscribe(after=5),
        )
        meta = genuine.meta()
        if sub is None:
            del meta["sub"]
        else:
            meta["sub"] = sub

        def hello(_relay: object) -> dict[str, object]:
            return teammate_hello(host_id=link.host_id, token=link.token, name="alice")

        with anyio.fail_after(30):
            async with dial(relay.url, "/v1/attach", hello, DialSettings(), backlog=1) as mux:
                channel = mux.open_channel("session", meta)
                with pytest.raises(ChannelClosedError) as closed:
                    await channel.receive()
        assert closed.value.code == CloseCode.DECRYPTION_FAILED
        assert "alice" not in {m.name for m in shared.presence.members()}
