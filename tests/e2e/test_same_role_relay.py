"""A holder of the same role who also controls the relay, played through a real relay process and
a hostile proxy in front of it: it can neither read another holder's channel nor make that holder
accept anything the host did not send (docs/security.md, "Opening a channel"). And a client of
the older protocol gets a clear close code, never a hang."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgpack
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from websockets.exceptions import ConnectionClosed

from tests.support import (
    RelayProcess,
    attach_and_echo,
    attach_proxy,
    host_settings,
    raw_peer,
    raw_teammate,
    running_host,
    via,
)
from tunnel.e2e.crypto import ChannelCipher, DecryptionError, ShareLink, e2e_root
from tunnel.e2e.identity import HostIdentity
from tunnel.e2e.opening import (
    ANSWER_SIZE,
    Offer,
    TeammateOpening,
    answer_offer,
    channel_keys,
    full_transcript_hash,
    make_proof,
)
from tunnel.host import HostChannel
from tunnel.proto import Data, Open, decode_frame, encode_frame
from tunnel.proto.codes import CloseCode
from tunnel.teammate.client import DecryptionFailedError, TeammateError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SECRET_MESSAGE = b"the staging password is hunter2"


def attacker_opening(link: ShareLink, name: str) -> TeammateOpening:
    """The attacker's own opening: it holds the same role secret as its victim."""
    return TeammateOpening(
        root=e2e_root(link.secret, link.host_id),
        host_id=link.host_id,
        role=link.role,
        name=name,
    )


def recording_echo(received: list[bytes]) -> Callable[[HostChannel], Any]:
    async def echo(channel: HostChannel) -> None:
        while True:
            message = await channel.receive()
            if channel.name != "probe":  # running_host's readiness probe
                received.append(message)
            await channel.send(message)

    return echo


async def test_a_swapped_ephemeral_key_is_caught_by_the_victim_before_it_sends_anything(
    relay: RelayProcess, tmp_path: Path
) -> None:
    received: list[bytes] = []
    sent_up: list[bytes] = []
    async with running_host(host_settings(relay.url, tmp_path), recording_echo(received)) as host:
        link = host.drive_link

        def swap_key(message: bytes) -> bytes:
            # The attacker replaces the victim's kx by its own, with a proof it can make since
            # it holds the same secret: the host accepts the open and signs that transcript.
            frame = decode_frame(message)
            if isinstance(frame, Open):
                mine = attacker_opening(link, frame.meta["name"])
                meta = {**frame.meta, "kx": mine.meta()["kx"], "proof": mine.meta()["proof"]}
                meta["salt"] = mine.meta()["salt"]
                return encode_frame(Open(channel=frame.channel, path=frame.path, meta=meta))
            if isinstance(frame, Data):
                sent_up.append(frame.data)
            return message

        async with attach_proxy(relay.url, up=swap_key) as proxy:
            with pytest.raises(DecryptionFailedError) as caught:
                await attach_and_echo(via(link, proxy), SECRET_MESSAGE)
    assert caught.value.code == CloseCode.DECRYPTION_FAILED
    assert sent_up == []  # the victim sealed nothing under keys the attacker could hold
    assert received == []


async def test_a_genuine_answer_from_another_channel_is_refused(
    relay: RelayProcess, tmp_path: Path
) -> None:
    # The attacker attaches with the same link through its own proxy, keeps the host's signed
    # answer, and hands it to the victim in place of the victim's own answer.
    answers: list[bytes] = []
    async with running_host(host_settings(relay.url, tmp_path), recording_echo([])) as host:
        link = host.view_link

        def keep_answer(message: bytes) -> bytes:
            frame = decode_frame(message)
            if isinstance(frame, Data) and len(frame.data) == ANSWER_SIZE and not answers:
                answers.append(frame.data)
            return message

        async with attach_proxy(relay.url, down=keep_answer) as attacker_proxy:
            assert await attach_and_echo(via(link, attacker_proxy), b"mine") == b"mine"
        assert len(answers) == 1

        def replace_answer(message: bytes) -> bytes:
            frame = decode_frame(message)
            if isinstance(frame, Data) and len(frame.data) == ANSWER_SIZE:
                return encode_frame(Data(channel=frame.channel, data=answers[0]))
            return message

        async with attach_proxy(relay.url, down=replace_answer) as proxy:
            with pytest.raises(DecryptionFailedError):
                await attach_and_echo(via(link, proxy), SECRET_MESSAGE)


async def test_an_answer_signed_by_the_attackers_own_key_is_refused(
    relay: RelayProcess, tmp_path: Path
) -> None:
    impostor = HostIdentity.generate()
    async with running_host(host_settings(relay.url, tmp_path), recording_echo([])) as host:
        link = host.drive_link
        offers: list[Open] = []

        def remember_open(message: bytes) -> bytes:
            frame = decode_frame(message)
            if isinstance(frame, Open):
                offers.append(frame)
            return message

        def forge_answer(message: bytes) -> bytes:
            frame = decode_frame(message)
            if not (isinstance(frame, Data) and len(frame.data) == ANSWER_SIZE):
                return message
            # A well-formed answer to the victim's very offer, signed by a key the attacker has.
            offer = Offer(
                host_id=impostor.host_id,
                role=link.role,
                name=offers[-1].meta["name"],
                salt=offers[-1].meta["salt"],
                teammate_key=offers[-1].meta["kx"],
            )
            root = e2e_root(link.secret, impostor.host_id)
            forged = answer_offer(impostor, root=root, offer=offer, proof=make_proof(root, offer))
            return encode_frame(Data(channel=frame.channel, data=forged.answer))

        async with attach_proxy(relay.url, up=remember_open, down=forge_answer) as proxy:
            with pytest.raises(DecryptionFailedError):
                await attach_and_echo(via(link, proxy), SECRET_MESSAGE)


async def test_a_passive_same_role_recorder_reads_nothing_and_cannot_inject(
    relay: RelayProcess, tmp_path: Path
) -> None:
    # The attacker records the victim's whole channel and holds the role secret; it tries every
    # key it can compute on what it recorded, then injects a message sealed the only ways it can.
    recorded_up: list[bytes] = []
    offers: list[dict[str, Any]] = []
    answers: list[bytes] = []
    received: list[bytes] = []
    async with running_host(host_settings(relay.url, tmp_path), recording_echo(received)) as host:
        link = host.drive_link
        root = e2e_root(link.secret, link.host_id)

        def record_up(message: bytes) -> bytes:
            frame = decode_frame(message)
            if isinstance(frame, Open):
                offers.append(frame.meta)
            elif isinstance(frame, Data):
                recorded_up.append(frame.data)
            return message

        def record_down(message: bytes) -> bytes:
            frame = decode_frame(message)
            if isinstance(frame, Data) and len(frame.data) == ANSWER_SIZE and not answers:
                answers.append(frame.data)
            return message

        async with attach_proxy(relay.url, up=record_up, down=record_down) as proxy:
            assert await attach_and_echo(via(link, proxy), SECRET_MESSAGE) == SECRET_MESSAGE
        assert received == [SECRET_MESSAGE]
        assert all(SECRET_MESSAGE not in data for data in recorded_up)

        # Every key the attacker can make: the root it holds, the transcript it saw, and a DH
        # secret of its own key with either ephemeral key on the wire.
        offer = Offer(
            host_id=link.host_id,
            role=link.role,
            name=offers[0]["name"],
            salt=offers[0]["salt"],
            teammate_key=offers[0]["kx"],
        )
        public_key, host_kx = answers[0][:32], answers[0][32:64]
        transcript = full_transcript_hash(offer, offers[0]["proof"], public_key, host_kx)
        guess = X25519PrivateKey.generate()
        for public in (host_kx, offers[0]["kx"]):
            shared = guess.exchange(X25519PublicKey.from_public_bytes(public))
            k_up, k_down = channel_keys(root, shared, transcript)
            for data in recorded_up:
                with pytest.raises(DecryptionError):
                    ChannelCipher(k_up, link.host_id).decrypt(data)

            # Injected toward the victim after the answer: refused, the victim sees nothing.
            forged = ChannelCipher(k_down, link.host_id).encrypt(
                msgpack.packb({"op": "echo", "text": "forged"})
            )
            injected = False

            def inject(message: bytes, forged: bytes = forged) -> bytes | list[bytes]:
                nonlocal injected
                frame = decode_frame(message)
                if isinstance(frame, Data) and len(frame.data) == ANSWER_SIZE and not injected:
                    injected = True
                    return [message, encode_frame(Data(channel=frame.channel, data=forged))]
                return message

            async with attach_proxy(relay.url, down=inject) as proxy:
                with pytest.raises(DecryptionFailedError):
                    await attach_and_echo(via(link, proxy), b"after the forgery")
            assert injected


async def test_an_older_client_gets_a_clear_close_code_never_a_hang(
    relay: RelayProcess, tmp_path: Path
) -> None:
    async with running_host(host_settings(relay.url, tmp_path), recording_echo([])) as host:
        link = host.view_link
        # A hello of the first protocol version: the relay refuses it.
        async with raw_peer(relay.url) as peer:
            await peer.receive_frame()
            await peer.send_frame(
                None,
                "hello",
                {
                    "role": "teammate",
                    "version": 1,
                    "host_id": link.host_id,
                    "token": link.token,
                    "name": "old",
                },
            )
            with anyio.fail_after(10), pytest.raises(ConnectionClosed) as closed:
                await peer.receive_frame()
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == 4000
            assert "version" in closed.value.rcvd.reason
        # An open without the key exchange (the first version's open): the host refuses it.
        async with raw_peer(relay.url) as peer:
            await raw_teammate(peer, link)
            meta = {"role": "view", "salt": bytes(16), "name": "old"}
            await peer.send_frame(1, "open", {"path": "session", "meta": meta})
            with anyio.fail_after(10):
                while (frame := await peer.receive_frame())["k"] != "close":
                    pass
            assert frame["c"] == 1
            assert frame["p"]["code"] == 4000
            assert "update the client" in frame["p"]["reason"]


async def test_a_teammate_error_names_the_refusal(relay: RelayProcess, tmp_path: Path) -> None:
    # What `tunnel attach` prints for the swapped-key attack: the close code and why.
    async with running_host(host_settings(relay.url, tmp_path), recording_echo([])) as host:
        link = host.view_link

        def wrong_size_answer(message: bytes) -> bytes:
            frame = decode_frame(message)
            if isinstance(frame, Data) and len(frame.data) == ANSWER_SIZE:
                return encode_frame(Data(channel=frame.channel, data=frame.data[:16]))
            return message

        async with attach_proxy(relay.url, down=wrong_size_answer) as proxy:
            with pytest.raises(TeammateError) as caught:
                await attach_and_echo(via(link, proxy), b"x")
    assert caught.value.code == CloseCode.PROTOCOL_ERROR
    assert "answer" in str(caught.value)
