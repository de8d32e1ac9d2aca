"""End-to-end crypto: vectors, key derivation, channel AEAD, share links and share secrets."""

from __future__ import annotations

import base64
import contextlib
import json
import re
from pathlib import Path

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunnel.e2e.crypto import (
    MAX_MESSAGES,
    ROLES,
    SALT_SIZE,
    ChannelCipher,
    ChannelCrypto,
    CounterExhaustedError,
    DecryptionError,
    ShareLink,
    ShareSecrets,
    b64url_decode,
    b64url_encode,
    e2e_root,
    new_salt,
    new_secret,
    relay_token,
    token_verifier,
)
from tunnel.e2e.identity import HostIdentity, KeyFileError
from tunnel.e2e.opening import OpeningError, TeammateOpening, answer_offer
from tunnel.e2e.vectors import reference_vectors, vectors_markdown
from tunnel.link.urls import normalize_relay_url
from tunnel.proto.codes import CloseCode

ROOT = Path(__file__).resolve().parents[2]
VECTORS_PATH = ROOT / "tests" / "vectors" / "crypto.json"
SECURITY_DOC = ROOT / "docs" / "security.md"
VECTORS = json.loads(VECTORS_PATH.read_text())
IDENTITY = HostIdentity.from_seed(bytes(range(32)))
HOST_ID = IDENTITY.host_id
OTHER_HOST_ID = HostIdentity.from_seed(bytes(range(1, 33))).host_id
SECRET = bytes(range(32))
SALT = bytes(range(16))
NAME = "alice"


def pair(secret: bytes = SECRET, salt: bytes = SALT) -> tuple[ChannelCrypto, ChannelCrypto]:
    """Return (teammate, host) ends of one channel, opened as tunnel.e2e.opening opens it."""
    root = e2e_root(secret, HOST_ID)
    opening = TeammateOpening(root=root, host_id=HOST_ID, role="drive", name=NAME, salt=salt)
    answered = answer_offer(IDENTITY, root=root, offer=opening.offer, proof=opening.proof)
    return opening.finish(answered.answer), answered.crypto


# --- vectors ------------------------------------------------------------------------------------


def test_vector_file_is_what_the_code_computes() -> None:
    assert reference_vectors() == VECTORS


def test_vector_file_is_the_generator_output_byte_for_byte() -> None:
    # So regenerating with `python -m tunnel.e2e.vectors --vectors` never produces a diff.
    assert VECTORS_PATH.read_text() == json.dumps(reference_vectors(), indent=2) + "\n"


def test_each_vector_follows_from_its_inputs() -> None:
    secret = bytes.fromhex(VECTORS["secret_hex"])
    host_id = VECTORS["host_id"]
    salt = bytes.fromhex(VECTORS["salt_hex"])
    plaintext = bytes.fromhex(VECTORS["plaintext_hex"])
    assert msgpack.unpackb(plaintext) == {"op": "prompt", "text": "hello"}
    assert b64url_encode(secret) == VECTORS["secret_b64url"]
    token = relay_token(secret, host_id)
    assert b64url_encode(token) == VECTORS["token_b64url"]
    assert token_verifier(token).hex() == VECTORS["verifier_hex"]
    root = e2e_root(secret, host_id)
    assert root.hex() == VECTORS["root_hex"]
    assert salt.hex() == VECTORS["salt_hex"]
    k_up, k_down = bytes.fromhex(VECTORS["k_up_hex"]), bytes.fromhex(VECTORS["k_down_hex"])
    host = ChannelCrypto(send=ChannelCipher(k_down, host_id), receive=ChannelCipher(k_up, host_id))
    assert host.receive.decrypt(bytes.fromhex(VECTORS["ciphertext_up_0_hex"])) == plaintext
    assert host.receive.decrypt(bytes.fromhex(VECTORS["ciphertext_up_1_hex"])) == plaintext
    reply = bytes.fromhex(VECTORS["reply_plaintext_hex"])
    assert host.send.encrypt(reply).hex() == VECTORS["ciphertext_down_0_hex"]
    link = ShareLink.parse(VECTORS["share_link"])
    assert (link.relay_url, link.host_id, link.role, link.secret) == (
        VECTORS["relay_url"],
        host_id,
        VECTORS["role"],
        secret,
    )
    assert b64url_encode(link.token) == VECTORS["token_b64url"]


def test_security_doc_embeds_the_vector_file() -> None:
    text = SECURITY_DOC.read_text()
    match = re.search(
        r"<!-- crypto-vectors:begin -->\n(.*?)<!-- crypto-vectors:end -->", text, re.DOTALL
    )
    assert match is not None, "docs/security.md lost its vector table markers"
    assert match.group(1) == vectors_markdown(VECTORS)


# --- key derivation -------------------------------------------------------------------------------


def test_token_and_root_are_distinct() -> None:
    values = {relay_token(SECRET, HOST_ID), e2e_root(SECRET, HOST_ID)}
    assert len(values) == 2
    assert all(len(v) == 32 for v in values)


def test_derivations_depend_on_secret_and_host() -> None:
    other_secret = bytes(32)
    assert relay_token(SECRET, HOST_ID) != relay_token(other_secret, HOST_ID)
    assert relay_token(SECRET, HOST_ID) != relay_token(SECRET, OTHER_HOST_ID)
    root = e2e_root(SECRET, HOST_ID)
    assert root != e2e_root(SECRET, OTHER_HOST_ID)


@pytest.mark.parametrize("size", [0, 16, 31, 33])
def test_secret_of_another_length_is_refused(size: int) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        relay_token(b"\x00" * size, HOST_ID)
    with pytest.raises(ValueError, match="32 bytes"):
        e2e_root(b"\x00" * size, HOST_ID)


def test_malformed_host_id_is_refused() -> None:
    with pytest.raises(ValueError, match="host id"):
        relay_token(SECRET, HOST_ID.upper())
    with pytest.raises(ValueError, match="host id"):
        ChannelCipher(bytes(32), "h\u00e9" * 13)


def test_new_secrets_and_salts_are_random_and_sized() -> None:
    assert len({new_secret() for _ in range(8)}) == 8
    assert {len(new_secret())} == {32}
    assert len({new_salt() for _ in range(8)}) == 8
    assert len(new_salt()) == SALT_SIZE


# --- base64url ------------------------------------------------------------------------------------


@given(st.binary(max_size=100))
def test_b64url_round_trips_without_padding(data: bytes) -> None:
    text = b64url_encode(data)
    assert "=" not in text
    assert "+" not in text
    assert "/" not in text
    assert b64url_decode(text) == data


@pytest.mark.parametrize(
    "text",
    ["AAECAw==", "AA+/", "AA/A", "AA A", " AAA", "AAA\n", "A", "AAAAA", "AB", "AAB", "é"],
)
def test_b64url_decode_is_strict(text: str) -> None:
    with pytest.raises(ValueError, match="base64url"):
        b64url_decode(text)


@given(st.text(max_size=50))
def test_b64url_decode_raises_only_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        b64url_decode(text)


# --- channel AEAD ---------------------------------------------------------------------------------


def test_messages_round_trip_both_ways_in_order() -> None:
    teammate, host = pair()
    for i in range(20):
        up = f"up {i}".encode() * i
        assert host.receive.decrypt(teammate.send.encrypt(up)) == up
        down = f"down {i}".encode()
        assert teammate.receive.decrypt(host.send.encrypt(down)) == down
    assert teammate.send.counter == host.receive.counter == 20


def test_empty_message_round_trips_and_costs_only_the_tag() -> None:
    teammate, host = pair()
    sealed = teammate.send.encrypt(b"")
    assert len(sealed) == 16
    assert host.receive.decrypt(sealed) == b""


def test_same_plaintext_encrypts_differently_each_time() -> None:
    teammate, _ = pair()
    assert teammate.send.encrypt(b"same") != teammate.send.encrypt(b"same")


def test_ciphertext_does_not_carry_the_nonce() -> None:
    teammate, _ = pair()
    assert len(teammate.send.encrypt(b"x" * 10)) == 10 + 16


def test_every_tampered_byte_fails_to_decrypt() -> None:
    teammate, _ = pair()
    sealed = teammate.send.encrypt(b"prompt: be careful")
    for index in range(len(sealed)):
        tampered = bytearray(sealed)
        tampered[index] ^= 0x01
        _, host = pair()
        with pytest.raises(DecryptionError):
            host.receive.decrypt(bytes(tampered))


@pytest.mark.parametrize("cut", [0, 1, 15, 16, 17])
def test_truncated_or_extended_ciphertext_fails(cut: int) -> None:
    teammate, host = pair()
    sealed = teammate.send.encrypt(b"hello")
    with pytest.raises(DecryptionError):
        host.receive.decrypt(sealed[:cut])
    _, host = pair()
    with pytest.raises(DecryptionError):
        host.receive.decrypt(sealed + b"\x00")


def test_replayed_message_fails() -> None:
    teammate, host = pair()
    first = teammate.send.encrypt(b"prompt once")
    assert host.receive.decrypt(first) == b"prompt once"
    with pytest.raises(DecryptionError):
        host.receive.decrypt(first)


def test_reordered_messages_fail() -> None:
    teammate, host = pair()
    first = teammate.send.encrypt(b"one")
    second = teammate.send.encrypt(b"two")
    with pytest.raises(DecryptionError):
        host.receive.decrypt(second)
    with pytest.raises(DecryptionError):
        host.receive.decrypt(first)


def test_dropping_a_message_and_continuing_fails() -> None:
    teammate, host = pair()
    host.receive.decrypt(teammate.send.encrypt(b"one"))
    teammate.send.encrypt(b"two: dropped by the relay")
    with pytest.raises(DecryptionError):
        host.receive.decrypt(teammate.send.encrypt(b"three"))


def test_cipher_is_dead_after_a_failure() -> None:
    teammate, host = pair()
    good = teammate.send.encrypt(b"good")
    with pytest.raises(DecryptionError):
        host.receive.decrypt(b"garbage that is long enough to hold a tag")
    # Even the message that would have been valid next is refused now.
    with pytest.raises(DecryptionError):
        host.receive.decrypt(good)
    with pytest.raises(DecryptionError):
        host.receive.encrypt(b"anything")


def test_decryption_error_carries_close_code_4003_and_no_details() -> None:
    _, host = pair()
    with pytest.raises(DecryptionError) as info:
        host.receive.decrypt(b"\x00" * 40)
    assert info.value.code == CloseCode.DECRYPTION_FAILED
    assert int(info.value.code) == 4003
    assert "tag" not in str(info.value).lower()


def test_a_viewer_cannot_drive_with_its_view_secret() -> None:
    secrets = ShareSecrets.generate()
    # The viewer claims "drive" in its open, so the host checks its proof against the drive root.
    opening = TeammateOpening(
        root=e2e_root(secrets.view, HOST_ID),
        host_id=HOST_ID,
        role="drive",
        name=NAME,
    )
    with pytest.raises(OpeningError) as info:
        answer_offer(
            IDENTITY,
            root=e2e_root(secrets.drive, HOST_ID),
            offer=opening.offer,
            proof=opening.proof,
        )
    assert info.value.code == CloseCode.DECRYPTION_FAILED


def test_each_role_secret_works_for_its_own_role() -> None:
    secrets = ShareSecrets.generate()
    for role in ROLES:
        teammate, host = pair(secrets.secret_for(role))
        assert host.receive.decrypt(teammate.send.encrypt(role.encode())) == role.encode()


def test_message_for_another_host_id_fails() -> None:
    sealed = ChannelCipher(bytes(32), HOST_ID).encrypt(b"x")
    with pytest.raises(DecryptionError):
        ChannelCipher(bytes(32), OTHER_HOST_ID).decrypt(sealed)


def test_message_from_another_channel_fails() -> None:
    teammate, _ = pair(salt=bytes(16))
    _, host = pair(salt=b"\x01" * 16)
    with pytest.raises(DecryptionError):
        host.receive.decrypt(teammate.send.encrypt(b"x"))


def test_message_reflected_back_to_its_sender_fails() -> None:
    teammate, _ = pair()
    with pytest.raises(DecryptionError):
        teammate.receive.decrypt(teammate.send.encrypt(b"x"))


def test_counter_refuses_to_wrap() -> None:
    teammate, host = pair()
    teammate.send._counter = MAX_MESSAGES - 1
    host.receive._counter = MAX_MESSAGES - 1
    last = teammate.send.encrypt(b"last")
    assert host.receive.decrypt(last) == b"last"
    with pytest.raises(CounterExhaustedError) as info:
        teammate.send.encrypt(b"one too many")
    assert info.value.code == CloseCode.LIMIT_REACHED
    with pytest.raises(DecryptionError):
        host.receive.decrypt(last)


def test_cipher_refuses_a_key_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        ChannelCipher(bytes(16), HOST_ID)


@given(st.lists(st.binary(max_size=64), max_size=5))
def test_decrypt_raises_only_decryption_error_on_junk(junk: list[bytes]) -> None:
    _, host = pair()
    for item in junk:
        with pytest.raises(DecryptionError):
            host.receive.decrypt(item)


# --- share links ----------------------------------------------------------------------------------


def make_link(role: str = "drive", relay_url: str = "https://relay.example") -> ShareLink:
    return ShareLink(relay_url=relay_url, host_id=HOST_ID, role=role, secret=SECRET)


@pytest.mark.parametrize(
    "relay_url",
    ["https://relay.example", "http://127.0.0.1:8765", "https://[::1]:8443", "http://localhost"],
)
@pytest.mark.parametrize("role", ROLES)
def test_share_link_round_trips_through_its_string(relay_url: str, role: str) -> None:
    link = make_link(role, relay_url)
    text = str(link)
    assert text == f"{relay_url}/h/{HOST_ID}#{role}.{b64url_encode(SECRET)}"
    assert ShareLink.parse(text) == link
    assert ShareLink.parse(f"  {text}\n") == link


def test_share_link_token_is_the_relay_token() -> None:
    assert make_link().token == relay_token(SECRET, HOST_ID)


def test_share_link_repr_hides_the_secret() -> None:
    shown = repr(make_link())
    assert b64url_encode(SECRET) not in shown
    assert SECRET.hex() not in shown
    assert "secret" not in shown


GOOD_FRAGMENT = f"drive.{b64url_encode(SECRET)}"
# Standard base64 ('+', '/') is not base64url: a link must not accept it.
STD_B64_SECRET = base64.b64encode(b"\xff" * 32).decode().rstrip("=")


@pytest.mark.parametrize(
    ("link", "message"),
    [
        (f"https://relay.example/h/{HOST_ID}", "no '#"),
        (f"https://relay.example/h/{HOST_ID}#", "no '#"),
        (f"https://relay.example/h/{HOST_ID}#drive", "<role>.<secret>"),
        (f"https://relay.example/h/{HOST_ID}#admin.{b64url_encode(SECRET)}", "unknown role"),
        (f"https://relay.example/h/{HOST_ID}#Drive.{b64url_encode(SECRET)}", "unknown role"),
        (f"https://relay.example/h/{HOST_ID}#drive.{b64url_encode(SECRET)}=", "not valid"),
        (f"https://relay.example/h/{HOST_ID}#drive.{STD_B64_SECRET}", "not valid"),
        (f"https://relay.example/h/{HOST_ID}#drive.{b64url_encode(SECRET[:31])}", "31 bytes"),
        (f"https://relay.example/h/{HOST_ID}#drive.{b64url_encode(SECRET + b'!')}", "33 bytes"),
        (f"https://relay.example/h/{HOST_ID}#drive.", "32"),
        (f"https://relay.example/x/{HOST_ID}#{GOOD_FRAGMENT}", "path"),
        (f"https://relay.example/h/{HOST_ID}/#{GOOD_FRAGMENT}", "path"),
        (f"https://relay.example/relay/h/{HOST_ID}#{GOOD_FRAGMENT}", "path"),
        (f"https://relay.example/h/{HOST_ID.upper()}#{GOOD_FRAGMENT}", "path"),
        (f"https://relay.example/h/{HOST_ID[:-1]}#{GOOD_FRAGMENT}", "path"),
        (f"https://relay.example/#{GOOD_FRAGMENT}", "path"),
        (f"https://relay.example/h/{HOST_ID}?x=1#{GOOD_FRAGMENT}", "query"),
        (f"ftp://relay.example/h/{HOST_ID}#{GOOD_FRAGMENT}", "https://"),
        (f"relay.example/h/{HOST_ID}#{GOOD_FRAGMENT}", "https://"),
        (f"https:///h/{HOST_ID}#{GOOD_FRAGMENT}", "no host"),
        (f"https://user@relay.example/h/{HOST_ID}#{GOOD_FRAGMENT}", "user info"),
        (f"https://relay.example:99999/h/{HOST_ID}#{GOOD_FRAGMENT}", "port"),
        ("", "no '#"),
    ],
)
def test_bad_share_links_are_refused_with_a_clear_message(link: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ShareLink.parse(link)


@given(st.text(max_size=200))
def test_share_link_parse_raises_only_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        ShareLink.parse(text)


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz234567ABZ-_./#:?=", max_size=60))
def test_share_link_parse_of_link_like_text_raises_only_value_error(tail: str) -> None:
    with contextlib.suppress(ValueError):
        ShareLink.parse(f"https://relay.example/h/{HOST_ID}#drive.{tail}")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("relay_url", "https://relay.example/", "no trailing slash"),
        ("relay_url", "https://relay.example/prefix", "no path"),
        ("relay_url", "wss://relay.example", "https://"),
        ("host_id", "nope", "host id"),
        ("role", "admin", "unknown role"),
        ("secret", b"short", "32 bytes"),
    ],
)
def test_share_link_refuses_bad_fields_at_construction(
    field: str, value: object, message: str
) -> None:
    fields: dict[str, object] = {
        "relay_url": "https://relay.example",
        "host_id": HOST_ID,
        "role": "view",
        "secret": SECRET,
    }
    fields[field] = value
    with pytest.raises(ValueError, match=re.escape(message)):
        ShareLink(**fields)  # type: ignore[arg-type]


def test_normalize_relay_url_keeps_only_the_origin() -> None:
    assert normalize_relay_url("https://relay.example/") == "https://relay.example"
    assert normalize_relay_url(" http://127.0.0.1:8765 ") == "http://127.0.0.1:8765"
    for bad in ["https://relay.example/x", "https://relay.example?q", "https://r.example#f"]:
        with pytest.raises(ValueError, match="no path"):
            normalize_relay_url(bad)


@pytest.mark.parametrize(
    ("spelled", "normal"),
    [
        ("http://LOCALHOST:8765/", "http://localhost:8765"),
        ("HTTPS://Relay.Example", "https://relay.example"),
        ("https://relay.example:443", "https://relay.example"),
        ("http://relay.example:80/", "http://relay.example"),
        ("https://relay.example:80", "https://relay.example:80"),  # not https's default
        ("http://relay.example:443", "http://relay.example:443"),
        ("http://relay.example:", "http://relay.example"),
        ("https://[::1]:8443", "https://[::1]:8443"),
        ("https://[2001:DB8::1]:443/", "https://[2001:db8::1]"),
        ("http://[::1]", "http://[::1]"),
    ],
)
def test_every_spelling_of_a_relay_url_normalizes_to_its_browser_origin(
    spelled: str, normal: str
) -> None:
    assert normalize_relay_url(spelled) == normal
    assert normalize_relay_url(normal) == normal  # the normal form is a fixed point


def test_the_vectors_relay_url_is_already_normal() -> None:
    # The vectors sign and link this URL verbatim: normalizing must not change them.
    assert normalize_relay_url(VECTORS["relay_url"]) == VECTORS["relay_url"]
    assert VECTORS["share_link"].startswith(VECTORS["relay_url"] + "/h/")


def test_a_share_link_with_an_unusual_spelling_parses_to_the_normal_relay_url() -> None:
    link = ShareLink.parse(f"HTTPS://Relay.Example:443/h/{HOST_ID}#view.{b64url_encode(SECRET)}")
    assert link.relay_url == "https://relay.example"
    assert str(link).startswith(f"https://relay.example/h/{HOST_ID}#")


def test_a_share_link_refuses_a_relay_url_that_is_not_normal() -> None:
    for spelled in ("https://Relay.example", "https://relay.example:443"):
        with pytest.raises(ValueError, match="default port"):
            make_link(relay_url=spelled)


# --- share secrets --------------------------------------------------------------------------------


def test_share_secrets_are_created_private_and_reload_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "share_secrets"
    created = ShareSecrets.load_or_create(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert ShareSecrets.load_or_create(path) == created
    assert created.view != created.drive


def test_rotated_secrets_replace_the_saved_ones(tmp_path: Path) -> None:
    path = tmp_path / "share_secrets"
    old = ShareSecrets.load_or_create(path)
    new = old.rotate()
    assert new.view != old.view
    assert new.drive != old.drive
    new.save(path)
    assert ShareSecrets.load_or_create(path) == new
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["share_secrets"]


def test_world_readable_share_secrets_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "share_secrets"
    ShareSecrets.load_or_create(path)
    path.chmod(0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        ShareSecrets.load_or_create(path)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{}",
        b"[]",
        b'{"format": "agent-tunnel share secrets v1", "view": "AAAA"}',
        b'{"format": "agent-tunnel share secrets v1", "view": 1, "drive": 2}',
        b'{"format": "other", "view": "", "drive": ""}',
    ],
)
def test_corrupt_share_secrets_are_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "share_secrets"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match="not a valid share secrets file"):
        ShareSecrets.load_or_create(path)


def test_verifiers_match_the_tokens_of_the_links() -> None:
    secrets = ShareSecrets.generate()
    verifiers = secrets.verifiers(HOST_ID)
    assert set(verifiers) == set(ROLES)
    for role in ROLES:
        link = secrets.link(role, "https://relay.example/", HOST_ID)
        assert str(link).startswith(f"https://relay.example/h/{HOST_ID}#{role}.")
        assert verifiers[role] == token_verifier(link.token)
    assert verifiers["view"] != verifiers["drive"]


def test_secret_for_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown role"):
        ShareSecrets.generate().secret_for("admin")


def test_share_secrets_repr_hides_the_secrets() -> None:
    secrets = ShareSecrets.generate()
    assert secrets.view.hex() not in repr(secrets)
    assert "view=" not in repr(secrets)


def test_equal_view_and_drive_secrets_are_refused() -> None:
    with pytest.raises(ValueError, match="differ"):
        ShareSecrets(view=SECRET, drive=SECRET)
