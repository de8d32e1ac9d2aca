"""Host identity: host ids, key files, hello signatures, authorized keys."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given
from hypothesis import strategies as st

from tunnel.e2e.identity import (
    HostIdentity,
    KeyFileError,
    default_key_path,
    derive_host_id,
    hello_signature_message,
    is_host_id,
    load_authorized_keys,
    read_private_file,
    verify_host_signature,
    write_private_file,
)

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "crypto.json").read_text())
CHALLENGE = bytes(range(32))
RELAY = "https://relay.example"


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- host ids ---------------------------------------------------------------------------------


def test_host_id_of_the_vector_key_matches_the_vector_file() -> None:
    identity = HostIdentity.from_seed(bytes.fromhex(VECTORS["host_seed_hex"]))
    assert identity.public_key.hex() == VECTORS["host_public_key_hex"]
    assert identity.host_id == VECTORS["host_id"]
    assert derive_host_id(identity.public_key) == VECTORS["host_id"]


@given(st.binary(min_size=32, max_size=32))
def test_host_id_is_26_chars_of_lowercase_base32(public_key: bytes) -> None:
    host_id = derive_host_id(public_key)
    assert len(host_id) == 26
    assert is_host_id(host_id)


def test_host_id_refuses_a_public_key_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        derive_host_id(b"\x00" * 31)


@pytest.mark.parametrize(
    "value",
    ["", "a" * 25, "a" * 27, "A" * 26, "a" * 25 + "1", "a" * 25 + "=", "a" * 25 + "\n"],
)
def test_is_host_id_rejects_malformed_ids(value: str) -> None:
    assert not is_host_id(value)


def test_generated_identities_differ() -> None:
    assert HostIdentity.generate().host_id != HostIdentity.generate().host_id


def test_repr_shows_the_host_id_and_not_the_key() -> None:
    identity = HostIdentity.from_seed(bytes(range(32)))
    assert repr(identity) == f"HostIdentity(host_id={identity.host_id!r})"


# --- key files --------------------------------------------------------------------------------


def test_key_file_is_created_private_and_reloads_to_the_same_host_id(tmp_path: Path) -> None:
    path = tmp_path / "config" / "agent-tunnel" / "host_key"
    created = HostIdentity.load_or_create(path)
    assert mode_of(path) == 0o600
    assert mode_of(path.parent) == 0o700
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    reloaded = HostIdentity.load_or_create(path)
    assert reloaded.host_id == created.host_id
    assert reloaded.public_key == created.public_key
    assert sorted(p.name for p in path.parent.iterdir()) == ["host_key"]


def test_key_file_is_private_even_under_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        HostIdentity.load_or_create(tmp_path / "k" / "host_key")
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "k" / "host_key") == 0o600
    assert mode_of(tmp_path / "k") == 0o700


def test_an_existing_parent_directory_keeps_its_mode(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    HostIdentity.load_or_create(tmp_path / "host_key")
    assert mode_of(tmp_path) == 0o755


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606, 0o666])
def test_key_file_readable_or_writable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "host_key"
    HostIdentity.load_or_create(path)
    path.chmod(mode)
    with pytest.raises(KeyFileError, match="chmod 600"):
        HostIdentity.load_or_create(path)


def test_key_file_with_junk_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "host_key"
    write_private_file(path, b"not a key\n", overwrite=False)
    with pytest.raises(KeyFileError, match="not a valid"):
        HostIdentity.load_or_create(path)
    assert path.read_bytes() == b"not a key\n"


def test_key_file_with_another_key_type_is_refused(tmp_path: Path) -> None:
    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path = tmp_path / "host_key"
    write_private_file(path, pem, overwrite=False)
    with pytest.raises(KeyFileError, match="not an Ed25519"):
        HostIdentity.load_or_create(path)


def test_key_path_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "host_key").mkdir()
    with pytest.raises(KeyFileError):
        HostIdentity.load_or_create(tmp_path / "host_key")


def test_private_file_is_not_clobbered_without_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    assert write_private_file(path, b"first", overwrite=False)
    assert not write_private_file(path, b"second", overwrite=False)
    assert read_private_file(path) == b"first"
    assert write_private_file(path, b"third", overwrite=True)
    assert read_private_file(path) == b"third"
    assert mode_of(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["secret"]


def test_default_key_path_is_in_the_agent_tunnel_config_dir() -> None:
    path = default_key_path()
    assert path.name == "host_key"
    assert path.parent.name == "agent-tunnel"


# --- hello signatures ---------------------------------------------------------------------------


def test_hello_signature_message_is_challenge_then_utf8_url() -> None:
    assert hello_signature_message(CHALLENGE, "https://rélay.example") == (
        CHALLENGE + "https://rélay.example".encode()
    )


@pytest.mark.parametrize("size", [0, 31, 33])
def test_hello_signature_message_refuses_a_challenge_of_the_wrong_size(size: int) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        hello_signature_message(b"\x01" * size, RELAY)


def test_hello_signature_of_the_vector_key_matches_the_vector_file() -> None:
    identity = HostIdentity.from_seed(bytes.fromhex(VECTORS["host_seed_hex"]))
    challenge = bytes.fromhex(VECTORS["challenge_hex"])
    sig = identity.sign_hello(challenge, VECTORS["relay_url"])
    assert sig.hex() == VECTORS["hello_signature_hex"]
    assert verify_host_signature(identity.public_key, challenge, VECTORS["relay_url"], sig)


def test_signature_verifies_only_for_the_same_key_challenge_and_relay() -> None:
    host = HostIdentity.generate()
    sig = host.sign(hello_signature_message(CHALLENGE, RELAY))
    assert verify_host_signature(host.public_key, CHALLENGE, RELAY, sig)
    other_challenge = bytes(reversed(CHALLENGE))
    assert not verify_host_signature(host.public_key, other_challenge, RELAY, sig)
    assert not verify_host_signature(host.public_key, CHALLENGE, "https://evil.example", sig)
    assert not verify_host_signature(HostIdentity.generate().public_key, CHALLENGE, RELAY, sig)
    forged = bytes([sig[0] ^ 1]) + sig[1:]
    assert not verify_host_signature(host.public_key, CHALLENGE, RELAY, forged)


@given(
    public_key=st.binary(max_size=40),
    challenge=st.binary(max_size=40),
    relay_url=st.text(max_size=20),
    sig=st.binary(max_size=80),
)
def test_verify_host_signature_never_raises(
    public_key: bytes, challenge: bytes, relay_url: str, sig: bytes
) -> None:
    assert verify_host_signature(public_key, challenge, relay_url, sig) is False


# --- authorized keys ----------------------------------------------------------------------------


def test_authorized_keys_accept_std_and_url_base64_comments_and_blank_lines(
    tmp_path: Path,
) -> None:
    keys = [HostIdentity.generate().public_key for _ in range(4)]
    # Keys whose base64 holds '+', '/', '-' or '_' prove both alphabets are read.
    keys.append(b"\xfb\xff" * 16)
    std = [base64.b64encode(k).decode() for k in keys]
    url = [base64.urlsafe_b64encode(k).decode() for k in keys]
    text = "\n".join(
        [
            "# hosts allowed on this relay",
            "",
            std[0],
            f"{url[1].rstrip('=')}   laptop of ana",
            f"  {std[2]}\tci runner # with a hash",
            "   # indented comment",
            url[3],
            url[4].rstrip("="),
            std[4],
        ]
    )
    path = tmp_path / "authorized_keys"
    path.write_text(text + "\n")
    assert load_authorized_keys(path) == frozenset(keys)


def test_empty_authorized_keys_file_allows_nobody(tmp_path: Path) -> None:
    path = tmp_path / "authorized_keys"
    path.write_text("# nobody yet\n\n")
    assert load_authorized_keys(path) == frozenset()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("ssh-ed25519", "OpenSSH"),
        ("not*base64", "base64"),
        (base64.b64encode(b"\x01" * 31).decode(), "31"),
        (base64.b64encode(b"\x01" * 33).decode(), "33"),
        ("A", "base64"),
        ("AAAA=A", "base64"),
    ],
)
def test_authorized_keys_junk_line_is_named_in_the_error(
    tmp_path: Path, line: str, message: str
) -> None:
    good = base64.b64encode(HostIdentity.generate().public_key).decode()
    path = tmp_path / "authorized_keys"
    path.write_text(f"# header\n{good}\n{line} comment\n")
    with pytest.raises(ValueError, match=f"line 3.*{message}") as info:
        load_authorized_keys(path)
    assert str(path) in str(info.value)
