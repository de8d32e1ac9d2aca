"""The channel opening (tunnel.e2e.opening): its vectors, and every field an attacker may change."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from tunnel.e2e.crypto import ChannelCipher, DecryptionError, e2e_root
from tunnel.e2e.identity import PUBLIC_KEY_SIZE, HostIdentity
from tunnel.e2e.opening import (
    ANSWER_SIGN_LABEL,
    ANSWER_SIZE,
    EPHEMERAL_KEY_SIZE,
    EarlySubscribe,
    OpeningError,
    TeammateOpening,
    answer_offer,
    channel_keys,
    check_early_subscribe,
    check_offer_fields,
    full_transcript_hash,
    make_proof,
    proof_key,
)
from tunnel.proto.codes import CloseCode

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "vectors" / "crypto.json").read_text())
IDENTITY = HostIdentity.from_seed(bytes.fromhex(VECTORS["host_seed_hex"]))
ROOT = e2e_root(bytes.fromhex(VECTORS["secret_hex"]), IDENTITY.host_id)


def opening(**overrides: object) -> TeammateOpening:
    values: dict[str, object] = {
        "root": ROOT,
        "host_id": IDENTITY.host_id,
        "role": "drive",
        "name": "alice",
    }
    values.update(overrides)
    return TeammateOpening(**values)  # type: ignore[arg-type]


def test_the_vectors_follow_from_their_inputs() -> None:
    teammate_private = X25519PrivateKey.from_private_bytes(
        bytes.fromhex(VECTORS["kx_teammate_private_hex"])
    )
    host_private = X25519PrivateKey.from_private_bytes(
        bytes.fromhex(VECTORS["kx_host_private_hex"])
    )
    mine = opening(
        private_key=teammate_private,
        salt=bytes.fromhex(VECTORS["salt_hex"]),
        name=VECTORS["name"],
        role=VECTORS["role"],
        subscribe=EarlySubscribe(
            after=int(VECTORS["kx_sub_after"]), conversation=VECTORS["kx_sub_conversation"]
        ),
    )
    assert mine.offer.subscribe is not None
    assert mine.offer.subscribe.transcript_field().hex() == VECTORS["kx_sub_field_hex"]
    assert mine.offer.teammate_key.hex() == VECTORS["kx_teammate_key_hex"]
    assert mine.offer.transcript_hash().hex() == VECTORS["kx_offer_hash_hex"]
    assert proof_key(ROOT).hex() == VECTORS["kx_proof_key_hex"]
    assert mine.proof.hex() == VECTORS["kx_proof_hex"]
    answered = answer_offer(
        IDENTITY, root=ROOT, offer=mine.offer, proof=mine.proof, private_key=host_private
    )
    assert answered.answer.hex() == VECTORS["kx_answer_hex"]
    crypto = mine.finish(answered.answer)
    plaintext = bytes.fromhex(VECTORS["plaintext_hex"])
    assert crypto.send.encrypt(plaintext).hex() == VECTORS["ciphertext_up_0_hex"]
    reply = bytes.fromhex(VECTORS["reply_plaintext_hex"])
    assert answered.crypto.send.encrypt(reply).hex() == VECTORS["ciphertext_down_0_hex"]
    assert crypto.receive.decrypt(bytes.fromhex(VECTORS["ciphertext_down_0_hex"])) == reply


def test_both_ends_agree_and_each_channel_has_keys_of_its_own() -> None:
    first, second = opening(), opening()
    one = answer_offer(IDENTITY, root=ROOT, offer=first.offer, proof=first.proof)
    two = answer_offer(IDENTITY, root=ROOT, offer=second.offer, proof=second.proof)
    teammate_one = first.finish(one.answer)
    second.finish(two.answer)
    sealed = teammate_one.send.encrypt(b"approve")
    assert one.crypto.receive.decrypt(sealed) == b"approve"
    # The same secret, the same name: still another channel's keys.
    with pytest.raises(DecryptionError):
        two.crypto.receive.decrypt(sealed)


# -- the host checks the offer ------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"host_id": HostIdentity.from_seed(bytes(32)).host_id},
        {"role": "view"},
        {"name": "mallory"},
        {"salt": bytes(16)},
        {"teammate_key": bytes(range(EPHEMERAL_KEY_SIZE))},
        {"subscribe": None},
        {"subscribe": EarlySubscribe(after=0, conversation="c-1")},
        {"subscribe": EarlySubscribe(after=7, conversation="c-2")},
        {"subscribe": EarlySubscribe(tail=7, conversation="c-1")},
    ],
    ids=[
        "host_id",
        "role",
        "name",
        "salt",
        "teammate_key",
        "sub dropped",
        "sub after",
        "sub conversation",
        "sub tail",
    ],
)
def test_an_offer_changed_on_the_way_fails_its_proof(change: dict[str, object]) -> None:
    genuine = opening(subscribe=EarlySubscribe(after=7, conversation="c-1"))
    changed = dataclasses.replace(genuine.offer, **change)  # type: ignore[arg-type]
    identity = IDENTITY
    if "host_id" in change:
        identity = HostIdentity.from_seed(bytes(32))
    with pytest.raises(OpeningError) as caught:
        answer_offer(identity, root=ROOT, offer=changed, proof=genuine.proof)
    assert caught.value.code == CloseCode.DECRYPTION_FAILED


def test_a_proof_made_with_another_roles_root_is_refused() -> None:
    view_root = e2e_root(bytes(32), IDENTITY.host_id)
    claimed_drive = opening(root=view_root)
    with pytest.raises(OpeningError) as caught:
        answer_offer(IDENTITY, root=ROOT, offer=claimed_drive.offer, proof=claimed_drive.proof)
    assert caught.value.code == CloseCode.DECRYPTION_FAILED


def test_an_open_of_an_older_client_or_of_the_wrong_shape_is_a_protocol_error() -> None:
    meta = opening().meta()
    with pytest.raises(OpeningError, match="update the client") as caught:
        check_offer_fields({"role": "drive", "salt": meta["salt"], "name": "alice"})
    assert caught.value.code == CloseCode.PROTOCOL_ERROR
    for key, bad in [("kx", b"short"), ("proof", "text"), ("salt", None), ("kx", None)]:
        with pytest.raises(OpeningError) as caught:
            check_offer_fields({**meta, key: bad})
        assert caught.value.code == CloseCode.PROTOCOL_ERROR
    assert check_offer_fields(meta) == (meta["salt"], meta["kx"], meta["proof"])


def test_a_low_order_teammate_key_is_refused_without_a_raw_exception() -> None:
    genuine = opening()
    zero = dataclasses.replace(genuine.offer, teammate_key=bytes(32))
    with pytest.raises(OpeningError) as caught:
        answer_offer(IDENTITY, root=ROOT, offer=zero, proof=make_proof(ROOT, zero))
    assert caught.value.code == CloseCode.DECRYPTION_FAILED


# -- the teammate checks the answer -------------------------------------------------------------


def flipped(answer: bytes, index: int) -> bytes:
    data = bytearray(answer)
    data[index % len(data)] ^= 0x01
    return bytes(data)


@pytest.mark.parametrize(
    "where",
    [
        0,
        PUBLIC_KEY_SIZE - 1,
        PUBLIC_KEY_SIZE,
        PUBLIC_KEY_SIZE + 31,
        ANSWER_SIZE - 64,
        ANSWER_SIZE - 1,
    ],
    ids=["public key", "public key end", "host kx", "host kx end", "signature", "signature end"],
)
def test_an_answer_changed_anywhere_is_refused(where: int) -> None:
    mine = opening()
    answer = answer_offer(IDENTITY, root=ROOT, offer=mine.offer, proof=mine.proof).answer
    with pytest.raises(OpeningError) as caught:
        mine.finish(flipped(answer, where))
    assert caught.value.code == CloseCode.DECRYPTION_FAILED


@pytest.mark.parametrize("size", [0, 16, ANSWER_SIZE - 1, ANSWER_SIZE + 1])
def test_an_answer_of_another_size_is_a_protocol_error(size: int) -> None:
    # 16 bytes: the host nonce a host of the first protocol version sends.
    with pytest.raises(OpeningError) as caught:
        opening().finish(bytes(size))
    assert caught.value.code == CloseCode.PROTOCOL_ERROR


def test_an_answer_for_another_channel_is_refused() -> None:
    # A same-role holder controlling the relay opens its own channel to the host and hands the
    # genuine, host-signed answer it got to the victim: it holds the attacker's key, not the
    # victim's, so the victim refuses it.
    victim, attacker = opening(), opening(name="alice")
    genuine = answer_offer(IDENTITY, root=ROOT, offer=attacker.offer, proof=attacker.proof)
    with pytest.raises(OpeningError) as caught:
        victim.finish(genuine.answer)
    assert caught.value.code == CloseCode.DECRYPTION_FAILED


def test_an_answer_signed_by_anyone_but_the_links_host_is_refused() -> None:
    # The attacker answers with its own key pair and a valid signature of its own: the public
    # key does not hash to the link's host id.
    mine = opening()
    impostor = HostIdentity.generate()
    offer = dataclasses.replace(mine.offer, host_id=impostor.host_id)
    forged = answer_offer(impostor, root=ROOT, offer=offer, proof=make_proof(ROOT, offer))
    with pytest.raises(OpeningError, match="not from the host"):
        mine.finish(forged.answer)


def test_a_same_role_holder_who_swaps_the_teammates_key_is_caught() -> None:
    # The attacker holds the role secret, so it can replace the victim's kx with its own and
    # make a valid proof; the host signs that transcript, which does not hold the victim's key.
    victim = opening()
    attacker_private = X25519PrivateKey.generate()
    attacker = opening(private_key=attacker_private, salt=victim.offer.salt)
    answered = answer_offer(IDENTITY, root=ROOT, offer=attacker.offer, proof=attacker.proof)
    with pytest.raises(OpeningError):
        victim.finish(answered.answer)


def test_the_ephemeral_key_is_forgotten_once_the_keys_are_made() -> None:
    mine = opening()
    answered = answer_offer(IDENTITY, root=ROOT, offer=mine.offer, proof=mine.proof)
    mine.finish(answered.answer)
    assert mine._private is None
    with pytest.raises(RuntimeError):
        mine.finish(answered.answer)


def test_a_recorded_channel_stays_closed_to_whoever_learns_the_secret_and_host_key_later() -> None:
    # Everything a passive recorder sees, plus the role root and the host key: the only key it
    # can compute uses a DH secret of its own, which is not the channel's.
    mine = opening()
    answered = answer_offer(IDENTITY, root=ROOT, offer=mine.offer, proof=mine.proof)
    sealed = mine.finish(answered.answer).send.encrypt(b"the deploy password is hunter2")
    host_key = answered.answer[PUBLIC_KEY_SIZE : PUBLIC_KEY_SIZE + EPHEMERAL_KEY_SIZE]
    transcript = full_transcript_hash(mine.offer, mine.proof, IDENTITY.public_key, host_key)
    guess = X25519PrivateKey.generate()

    for public in (host_key, mine.offer.teammate_key):
        shared = guess.exchange(X25519PublicKey.from_public_bytes(public))
        k_up, _ = channel_keys(ROOT, shared, transcript)
        with pytest.raises(DecryptionError):
            ChannelCipher(k_up, IDENTITY.host_id).decrypt(sealed)


def test_no_signature_of_the_host_stands_for_another() -> None:
    # The three labelled messages the host key signs start differently.
    from tunnel.e2e.broadcast import SIGN_LABEL

    assert ANSWER_SIGN_LABEL != SIGN_LABEL
    assert len(ANSWER_SIGN_LABEL) == len(SIGN_LABEL) == 32
    assert not SIGN_LABEL.startswith(b"https")
    assert not ANSWER_SIGN_LABEL.startswith(b"https")


def test_an_early_subscribe_goes_in_the_meta_and_comes_out_as_it_went() -> None:
    for early in (
        EarlySubscribe(),
        EarlySubscribe(tail=50),
        EarlySubscribe(after=-1),
        EarlySubscribe(after=12, conversation="c-0001"),
    ):
        meta = opening(subscribe=early).meta()
        assert check_early_subscribe(meta) == early
    assert "sub" not in opening().meta()
    assert check_early_subscribe(opening().meta()) is None


@pytest.mark.parametrize(
    "sub",
    [
        [],
        {"after": "1"},
        {"after": True},
        {"head": 1},
        {"conversation": ""},
        {"conversation": "x" * 257},
        {"conversation": 5},
    ],
    ids=repr,
)
def test_a_malformed_early_subscribe_is_a_protocol_error(sub: object) -> None:
    with pytest.raises(OpeningError) as caught:
        check_early_subscribe({"sub": sub})
    assert caught.value.code == CloseCode.PROTOCOL_ERROR


def test_the_transcript_tells_no_early_subscribe_from_a_fresh_one() -> None:
    none, fresh = opening(salt=bytes(16)), opening(salt=bytes(16), subscribe=EarlySubscribe())
    fresh_offer = dataclasses.replace(fresh.offer, teammate_key=none.offer.teammate_key)
    assert none.offer.transcript_hash() != fresh_offer.transcript_hash()
