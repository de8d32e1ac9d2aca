"""Hello payloads of relay, host and teammate: built and checked without any I/O."""

from __future__ import annotations

import hashlib

import pytest

from tunnel.e2e.crypto import ShareSecrets
from tunnel.e2e.identity import HostIdentity
from tunnel.handshake import (
    CAST_GROUPS,
    INSTANCE_SIZE,
    PROTOCOL_VERSION,
    HelloError,
    RelayHello,
    agreed_limits,
    host_hello,
    parse_host_hello,
    parse_relay_hello,
    parse_teammate_hello,
    relay_hello,
    teammate_hello,
)
from tunnel.proto import Limits
from tunnel.proto.codes import CloseCode
from tunnel.relay.admission import match_role


def signed_hello(
    identity: HostIdentity,
    challenge: bytes,
    url: str,
    *,
    instance: bytes = bytes(INSTANCE_SIZE),
    replace: bool = False,
) -> dict[str, object]:
    relay = RelayHello(challenge=challenge, limits={})
    verifiers = ShareSecrets.generate().verifiers(identity.host_id)
    return host_hello(
        identity,
        relay,
        relay_url=url,
        capabilities=("chat",),
        verifiers=verifiers,
        instance=instance,
        replace=replace,
    )


def test_a_host_hello_is_checked_against_challenge_url_and_authorized_keys() -> None:
    identity = HostIdentity.generate()
    challenge = bytes(32)
    url = "https://relay.example"
    hello = parse_host_hello(
        signed_hello(identity, challenge, url),
        challenge=challenge,
        public_url=url,
        authorized_keys=None,
    )
    assert hello.host_id == identity.host_id
    assert hello.capabilities == ("chat",)
    for kwargs, code in [
        ({"challenge": bytes([1]) * 32, "public_url": url, "authorized_keys": None}, 4002),
        ({"challenge": challenge, "public_url": "https://other", "authorized_keys": None}, 4002),
        ({"challenge": challenge, "public_url": url, "authorized_keys": frozenset()}, 4002),
    ]:
        with pytest.raises(HelloError) as caught:
            parse_host_hello(signed_hello(identity, challenge, url), **kwargs)  # type: ignore[arg-type]
        assert caught.value.code == code


@pytest.mark.parametrize(
    "change",
    [
        {"role": "teammate"},
        {"version": PROTOCOL_VERSION - 1},
        {"version": True},
        {"pubkey": b"short"},
        {"verifiers": {"view": bytes(32)}},
        {"capabilities": "chat"},
        {"extra": 1},
        {"instance": b"short"},
        {"instance": bytes(INSTANCE_SIZE + 1)},
        {"instance": "0123456789abcdef"},
        {"instance": None},
        {"replace": 1},
        {"replace": "yes"},
        {"replace": None},
    ],
)
def test_a_malformed_host_hello_is_a_protocol_error(change: dict[str, object]) -> None:
    identity = HostIdentity.generate()
    payload = {**signed_hello(identity, bytes(32), "https://r"), **change}
    with pytest.raises(HelloError) as caught:
        parse_host_hello(payload, challenge=bytes(32), public_url="https://r", authorized_keys=None)
    assert caught.value.code == CloseCode.PROTOCOL_ERROR


def test_a_host_hello_says_which_process_it_is_and_whether_it_takes_over() -> None:
    identity = HostIdentity.generate()
    instance = bytes(range(INSTANCE_SIZE))
    for replace in (False, True):
        payload = signed_hello(identity, bytes(32), "https://r", instance=instance, replace=replace)
        hello = parse_host_hello(
            payload, challenge=bytes(32), public_url="https://r", authorized_keys=None
        )
        assert (hello.instance, hello.replace) == (instance, replace)


def test_a_host_hello_without_instance_or_replace_matches_no_process_and_replaces_none() -> None:
    identity = HostIdentity.generate()
    payload = signed_hello(identity, bytes(32), "https://r")
    del payload["instance"], payload["replace"]
    hello = parse_host_hello(
        payload, challenge=bytes(32), public_url="https://r", authorized_keys=None
    )
    assert (hello.instance, hello.replace) == (None, False)


@pytest.mark.parametrize("size", [0, INSTANCE_SIZE - 1, INSTANCE_SIZE + 1])
def test_a_host_cannot_build_a_hello_with_an_instance_of_another_size(size: int) -> None:
    with pytest.raises(ValueError, match="instance"):
        signed_hello(HostIdentity.generate(), bytes(32), "https://r", instance=bytes(size))


def test_teammate_hellos_keep_only_a_hash_of_the_token_and_match_one_role() -> None:
    host_id = HostIdentity.generate().host_id
    hello = parse_teammate_hello(
        {
            "role": "teammate",
            "version": PROTOCOL_VERSION,
            "host_id": host_id,
            "token": b"t" * 32,
            "name": "ann",
        }
    )
    assert hello.token_hash == hashlib.sha256(b"t" * 32).digest()
    assert "t" * 32 not in repr(hello)
    verifiers = {"view": hashlib.sha256(b"v").digest(), "drive": hello.token_hash}
    assert match_role(hello.token_hash, verifiers) == "drive"
    assert match_role(hashlib.sha256(b"x").digest(), verifiers) is None
    for bad in ({"host_id": "NOT-AN-ID"}, {"name": "n" * 65}, {"token": "text"}, {"x": 1}):
        with pytest.raises(HelloError):
            parse_teammate_hello(
                {
                    "role": "teammate",
                    "version": PROTOCOL_VERSION,
                    "host_id": host_id,
                    "token": b"t",
                    **bad,
                }
            )


def test_what_each_end_builds_is_what_the_other_accepts() -> None:
    limits = Limits(initial_window=65536, max_data_size=8192, max_channels=None)
    relay = parse_relay_hello(relay_hello(bytes(range(32)), limits))
    assert relay.challenge == bytes(range(32))
    # None turns a limit off: it is left out, not advertised as a value.
    assert dict(relay.limits) == {
        "max_message_size": limits.max_message_size,
        "max_data_size": 8192,
        "max_string_length": limits.max_string_length,
        "initial_window": 65536,
    }
    identity = HostIdentity.generate()
    hello = parse_host_hello(
        signed_hello(identity, relay.challenge, "https://r"),
        challenge=relay.challenge,
        public_url="https://r",
        authorized_keys=frozenset({identity.public_key}),
    )
    assert hello.public_key == identity.public_key
    teammate = parse_teammate_hello(
        teammate_hello(host_id=identity.host_id, token=b"t" * 32, name="ann")
    )
    assert (teammate.host_id, teammate.name) == (identity.host_id, "ann")


@pytest.mark.parametrize(
    "change",
    [
        {"role": "host"},
        {"version": PROTOCOL_VERSION + 1},
        {"challenge": b"short"},
        {"challenge": "text"},
        {"limits": [1, 2]},
        {"limits": {"initial_window": 0}},
        {"limits": {"max_data_size": True}},
        {"limits": {"max_data_size": "big"}},
        {"capabilities": "cast-groups"},
        {"capabilities": [1]},
        {"capabilities": ["x"] * 33},
    ],
)
def test_a_relay_hello_a_dialer_cannot_use_is_a_protocol_error(change: dict[str, object]) -> None:
    payload = {**relay_hello(bytes(32), Limits()), **change}
    with pytest.raises(HelloError) as caught:
        parse_relay_hello(payload)
    assert caught.value.code == CloseCode.PROTOCOL_ERROR
    assert caught.value.by_peer


def test_a_dialer_adopts_the_relays_window_and_the_smaller_data_size() -> None:
    ours = Limits(initial_window=256 * 1024, max_data_size=128 * 1024, max_channels=1024)
    smaller = RelayHello(
        challenge=bytes(32), limits={"initial_window": 4096, "max_data_size": 1024}
    )
    agreed = agreed_limits(ours, smaller)
    assert (agreed.initial_window, agreed.max_data_size, agreed.largest_data) == (4096, 1024, 1024)
    assert agreed.max_channels == 1024  # not advertised: ours stays
    larger = RelayHello(
        challenge=bytes(32), limits={"initial_window": 2**20, "max_data_size": 2**20}
    )
    agreed = agreed_limits(ours, larger)
    # The window must be the relay's (both ends of a link start equal); a frame must fit both.
    assert (agreed.initial_window, agreed.max_data_size) == (2**20, 128 * 1024)
    assert agreed_limits(ours, RelayHello(challenge=bytes(32), limits={})) == ours


def test_a_host_hello_states_the_hosts_own_limits() -> None:
    identity = HostIdentity.generate()
    relay = RelayHello(challenge=bytes(32), limits={})
    payload = host_hello(
        identity,
        relay,
        relay_url="https://r",
        capabilities=(),
        verifiers=ShareSecrets.generate().verifiers(identity.host_id),
        instance=bytes(16),
        limits=Limits(max_channels=3, max_data_size=None),
    )
    hello = parse_host_hello(
        payload, challenge=bytes(32), public_url="https://r", authorized_keys=None
    )
    assert hello.limits["max_channels"] == 3
    assert "max_data_size" not in hello.limits  # off: left out
    for bad in ([1], {"max_channels": 0}, {"max_channels": "3"}):
        with pytest.raises(HelloError):
            parse_host_hello(
                {**payload, "limits": bad},
                challenge=bytes(32),
                public_url="https://r",
                authorized_keys=None,
            )


def test_a_relay_says_it_takes_broadcast_groups_and_one_that_does_not_say_so_does_not() -> None:
    payload = relay_hello(bytes(32), Limits())
    assert payload["capabilities"] == [CAST_GROUPS]
    assert parse_relay_hello(payload).cast_groups
    # A relay from before capabilities leaves them out; unknown ones are kept unread.
    older = {key: value for key, value in payload.items() if key != "capabilities"}
    assert not parse_relay_hello(older).cast_groups
    newer = parse_relay_hello({**payload, "capabilities": ["later", CAST_GROUPS]})
    assert newer.cast_groups
    assert newer.capabilities == frozenset({"later", CAST_GROUPS})
