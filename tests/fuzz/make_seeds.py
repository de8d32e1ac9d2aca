"""Write the fuzz targets' seed corpora and dictionaries: `python -m tests.fuzz.make_seeds`.

Without seeds a campaign spends its runs finding the msgpack map and the field names byte by
byte, and mostly exercises early rejection. Each target gets, in `seeds/<target>/`, small inputs
that parse (`ok-*`, built with the project's own encoders) and inputs one mistake away from
parsing (`near-*`), and in `dicts/<target>.dict` the tokens of its format (msgpack-encoded keys,
kinds, ops and values) in libFuzzer's dictionary format. The output is deterministic: run this
after changing a decoder or an encoder and commit what it writes; `test_seeds.py` checks that the
committed files are what it writes now.

What they buy, in libFuzzer's `cov:` edges after the suite's campaign (100,000 runs, `-seed=1
-max_len=4096`), from an empty corpus without a dictionary versus from these seeds with it
(measured when they were written; the seeds alone reach most of it before the first mutation):

    target        unseeded  seeded   (seeds alone)
    frame               36     178   165   (with the broadcast frames)
    connection          95     241   198   (with the broadcast frames)
    request             25      66    56
    host_message        21      47    33
    item                25      82    61
    hello               24      81    71
    link                 6      67    61
    cast                30      34    34
    cast_messages       19      19    12
    opening              -      92    75   (unseeded not measured)
    export               -       -     -   (an export file, as `tunnel log verify` reads it)

`cast` and `cast_messages` are small parsers in front of uninstrumented code (the cryptography
and msgpack extensions): their seeds are there so that a campaign starts from a cast that opens
and a plaintext that parses, not for edges.
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgpack
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tunnel.app.errors import ERROR_CODES
from tunnel.app.host_messages import (
    Error,
    EventMessage,
    HistoryPage,
    ItemMessage,
    Member,
    PresenceDelta,
    PresenceMessage,
    Ready,
    SandboxInfo,
    Snapshot,
    TerminalSize,
    encode,
)
from tunnel.app.requests import (
    Cancel,
    Focus,
    History,
    Input,
    PermissionAnswer,
    Prompt,
    PushOff,
    PushOn,
    Resize,
    SetConfig,
    SetMode,
    SetModel,
    Subscribe,
    encode_request,
)
from tunnel.e2e.broadcast import BroadcastKey, CastSealer
from tunnel.e2e.broadcast import reference_vectors as cast_vectors
from tunnel.e2e.crypto import ROLES, SECRET_SIZE, ShareLink
from tunnel.e2e.identity import HostIdentity
from tunnel.e2e.vectors import reference_vectors
from tunnel.handshake import INSTANCE_SIZE, PROTOCOL_VERSION, teammate_hello
from tunnel.log.item import CORRUPT_TYPE, Event, Item
from tunnel.proto.frames import (
    KINDS,
    MAX_CAST_GROUPS,
    MAX_CLOSE_CODE,
    MIN_CLOSE_CODE,
    Cast,
    Close,
    Cut,
    Data,
    Join,
    Open,
    Part,
    Window,
)
from tunnel.proto.frames import encode_frame as frame_bytes

HERE = Path(__file__).resolve().parent
SEEDS = HERE / "seeds"
DICTS = HERE / "dicts"

CHALLENGE = bytes(32)
"""The challenge and relay URL the `hello` target checks host hellos against."""
PUBLIC_URL = "http://127.0.0.1:1"
CHUNK = 64
"""The `connection` target feeds its input as WebSocket messages of this many bytes."""

CAST_IDENTITY = HostIdentity.from_seed(bytes(range(0x20, 0x40)))
CAST_KEY = BroadcastKey(epoch=bytes(range(0x80, 0x90)), key=bytes(range(0x90, 0xB0)))
CAST_COUNTER = 5
"""The broadcast the `cast` target opens casts of: that of tunnel/e2e/broadcast.py's reference
vectors (and of targets.py, which spells the same inputs out)."""

T0 = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)
IDENTITY = HostIdentity.from_seed(bytes(range(32)))
SECRET = bytes(range(100, 100 + SECRET_SIZE))


def pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


# -- frame and connection ------------------------------------------------------------------------


def frame_seeds() -> dict[str, bytes]:
    seeds = {
        "ok-hello": pack({"c": None, "k": "hello", "p": {"role": "host", "version": 1}}),
        "ok-open": frame_bytes(Open(channel=1, path="session", meta={"role": "drive", "n": 1})),
        "ok-data": frame_bytes(Data(channel=1, data=b"\x93\x01\x02\x03")),
        "ok-close": frame_bytes(Close(channel=1, code=MIN_CLOSE_CODE, reason="bye")),
        "ok-close-max": frame_bytes(Close(channel=7, code=MAX_CLOSE_CODE, reason="")),
        "ok-window": frame_bytes(Window(channel=2**32 - 1, n=2**32 - 1)),
        "ok-open-nested-meta": frame_bytes(
            Open(channel=3, path="session", meta={"a": [1, {"b": [True, None, 1.5]}]})
        ),
    }
    near = {
        "near-unknown-kind": {"c": 1, "k": "ping", "p": {}},
        "near-extra-key": {"c": 1, "k": "window", "p": {"n": 1}, "x": 0},
        "near-hello-with-channel": {"c": 1, "k": "hello", "p": {}},
        "near-open-nil-channel": {"c": None, "k": "open", "p": {"path": "s", "meta": {}}},
        "near-open-meta-not-map": {"c": 1, "k": "open", "p": {"path": "s", "meta": [1]}},
        "near-data-str": {"c": 1, "k": "data", "p": {"d": "text, not bytes"}},
        "near-data-empty": {"c": 1, "k": "data", "p": {"d": b""}},
        "near-close-code-low": {"c": 1, "k": "close", "p": {"code": 999, "reason": ""}},
        "near-close-code-high": {"c": 1, "k": "close", "p": {"code": 5000, "reason": ""}},
        "near-window-zero": {"c": 1, "k": "window", "p": {"n": 0}},
        "near-window-bool": {"c": 1, "k": "window", "p": {"n": True}},
        "near-channel-too-big": {"c": 2**32, "k": "window", "p": {"n": 1}},
        "near-payload-list": {"c": 1, "k": "window", "p": [1]},
    }
    seeds.update({name: pack(wire) for name, wire in near.items()})
    seeds["near-ext-type"] = pack({"c": 1, "k": "data", "p": {"d": msgpack.ExtType(1, b"x")}})
    seeds["near-int-key"] = pack({1: 1, "k": "window", "p": {"n": 1}})
    seeds["near-truncated"] = frame_bytes(Data(channel=1, data=b"abcdef"))[:-2]
    seeds["near-trailing-byte"] = frame_bytes(Window(channel=1, n=1)) + b"\xc0"
    # A header that announces a string far longer than the message.
    seeds["near-huge-str-header"] = b"\x83\xa1c\x01\xa1k\xdb\xff\xff\xff\xff"
    # The fixed forms decode_frame reads without msgpack (frames.py), and near misses of them.
    data_head, window_head = b"\xa1k\xa4data\xa1p\x81\xa1d", b"\xa1k\xa6window\xa1p\x81\xa1n"
    seeds["ok-data-wide-ids"] = frame_bytes(Data(channel=70000, data=b"w" * 300))
    seeds["ok-window-wide-ids"] = frame_bytes(Window(channel=300, n=70000))
    seeds["ok-data-not-shortest"] = b"\x83\xa1c\xcd\x00\x01" + data_head + b"\xc6\x00\x00\x00\x01x"
    seeds["ok-data-uint64-id"] = b"\x83\xa1c\xcf" + bytes(7) + b"\x01" + data_head + b"\xc4\x01x"
    seeds["near-data-bin-past-end"] = b"\x83\xa1c\x01" + data_head + b"\xc5\x00\x09abc"
    seeds["near-data-negative-id"] = b"\x83\xa1c\xff" + data_head + b"\xc4\x01x"
    seeds["ok-window-int8-grant"] = b"\x83\xa1c\x01" + window_head + b"\xd0\x05"
    seeds["near-window-negative-grant"] = b"\x83\xa1c\x01" + window_head + b"\xd0\xfb"
    seeds.update(_broadcast_frame_seeds())
    return seeds


def _broadcast_frame_seeds() -> dict[str, bytes]:
    """The host's broadcast (docs/protocol.md, "Broadcast"): `cast` with and without a channel
    (the former in the fast path's fixed form), `join`, `part` and `cut`, and near misses."""
    cast_head = b"\xa1k\xa4cast\xa1p\x81\xa1d"
    seeds = {
        "ok-cast-from-host": frame_bytes(Cast(channel=None, data=b"sealed once")),
        "ok-cast-to-channel": frame_bytes(Cast(channel=1, data=b"\x91\xc4\x01x")),
        "ok-cast-wide-ids": frame_bytes(Cast(channel=70000, data=b"c" * 300)),
        "ok-cast-not-shortest": b"\x83\xa1c\xcd\x00\x03" + cast_head + b"\xc6\x00\x00\x00\x01x",
        "ok-join": frame_bytes(Join(channel=2)),
        "ok-cast-to-group": frame_bytes(Cast(channel=None, data=b"sealed once", group=5)),
        "ok-cast-to-last-group": frame_bytes(
            Cast(channel=None, data=b"x", group=MAX_CAST_GROUPS - 1)
        ),
        "ok-join-group": frame_bytes(Join(channel=2, group=1)),
        "ok-part": frame_bytes(Part(channel=2**32 - 1)),
        "ok-cut": frame_bytes(Cut(channel=1)),
        "near-cast-bin-past-end": b"\x83\xa1c\x01" + cast_head + b"\xc5\x00\x09abc",
        "near-cast-negative-id": b"\x83\xa1c\xff" + cast_head + b"\xc4\x01x",
    }
    near = {
        "near-cast-empty": {"c": None, "k": "cast", "p": {"d": b""}},
        "near-cast-str": {"c": 1, "k": "cast", "p": {"d": "text, not bytes"}},
        "near-cast-extra-key": {"c": None, "k": "cast", "p": {"d": b"x", "n": 1}},
        "near-cast-bool-channel": {"c": True, "k": "cast", "p": {"d": b"x"}},
        "near-join-payload": {"c": 2, "k": "join", "p": {"d": b"x"}},
        "near-cast-group-too-high": {
            "c": None,
            "k": "cast",
            "p": {"d": b"x", "g": MAX_CAST_GROUPS},
        },
        "near-cast-group-negative": {"c": None, "k": "cast", "p": {"d": b"x", "g": -1}},
        "near-cast-group-bool": {"c": None, "k": "cast", "p": {"d": b"x", "g": True}},
        "near-cast-to-channel-with-group": {"c": 1, "k": "cast", "p": {"d": b"x", "g": 1}},
        "near-join-group-str": {"c": 2, "k": "join", "p": {"g": "1"}},
        "near-join-group-extra-key": {"c": 2, "k": "join", "p": {"g": 1, "d": b"x"}},
        "near-part-group": {"c": 2, "k": "part", "p": {"g": 1}},
        "near-part-float-channel": {"c": 2.0, "k": "part", "p": {}},
        "near-cut-nil-channel": {"c": None, "k": "cut", "p": {}},
        "near-cut-payload-list": {"c": 1, "k": "cut", "p": []},
    }
    seeds.update({name: pack(wire) for name, wire in near.items()})
    return seeds


def _chunk(make: Callable[[int], bytes]) -> bytes:
    """`make(n)` padded by `n` so that it is exactly one `CHUNK`-byte message."""
    for n in range(CHUNK):
        message = make(n)
        if len(message) == CHUNK:
            return message
    raise AssertionError("no padding makes this frame one chunk")


def _open(channel: int) -> bytes:
    return _chunk(lambda n: frame_bytes(Open(channel=channel, path="session", meta={"p": "x" * n})))


def _data(channel: int) -> bytes:
    return _chunk(lambda n: frame_bytes(Data(channel=channel, data=b"d" * (n + 1))))


def _close(channel: int, code: int = 1000) -> bytes:
    return _chunk(lambda n: frame_bytes(Close(channel=channel, code=code, reason="r" * n)))


def _cast(channel: int | None, group: int = 0) -> bytes:
    return _chunk(lambda n: frame_bytes(Cast(channel=channel, data=b"c" * (n + 1), group=group)))


def connection_seeds() -> dict[str, bytes]:
    # The peer is the dialer (odd channel ids); its hello was already received. A window frame
    # cannot be padded to a chunk, so it only ends a sequence; and since this side never sends,
    # any grant to it is beyond its initial window. `join`, `part` and `cut` have an empty
    # payload: they too only end a sequence.
    window = frame_bytes(Window(channel=1, n=4096))
    return {
        "ok-casts": _cast(None) + _cast(None) + _cast(None),
        "ok-cast-and-join": _open(1) + _cast(None) + _data(1) + frame_bytes(Join(channel=1)),
        "ok-cast-and-part": _open(3) + _cast(None) + frame_bytes(Part(channel=3)),
        "ok-casts-to-groups": _cast(None, 1) + _cast(None) + _cast(None, MAX_CAST_GROUPS - 1),
        "ok-cast-and-join-group": _open(1) + _cast(None, 2) + frame_bytes(Join(channel=1, group=2)),
        "near-cast-to-the-relay-with-a-channel": _open(1) + _cast(1),
        "near-cut-to-the-relay": _open(1) + frame_bytes(Cut(channel=1)),
        "near-join-unknown-channel": _cast(None) + frame_bytes(Join(channel=5)),
        "near-part-after-close": _open(1) + _close(1) + frame_bytes(Part(channel=1)),
        "ok-open-data-close": _open(1) + _data(1) + _data(1) + _close(1),
        "ok-two-channels": _open(1) + _open(3) + _data(3) + _data(1) + _close(3) + _close(1),
        "near-window-beyond-initial": _open(1) + _data(1) + window,
        "ok-reopen": _open(1) + _close(1) + _open(1) + _data(1),
        "ok-close-code": _open(5) + _close(5, 4000),
        "near-even-channel": _open(2) + _data(2),
        "near-data-before-open": _data(1) + _open(1),
        "near-open-twice": _open(1) + _open(1),
        "near-second-hello": _chunk(lambda n: pack({"c": None, "k": "hello", "p": {"p": "x" * n}})),
        "near-window-unknown-channel": frame_bytes(Window(channel=9, n=1)),
    }


# -- the broadcast -------------------------------------------------------------------------------


def _sealed(plaintext: bytes, counter: int = CAST_COUNTER, **overrides: Any) -> bytes:
    identity = overrides.get("identity", CAST_IDENTITY)
    key = overrides.get("key", CAST_KEY)
    return CastSealer(identity, key, counter=counter).seal(plaintext)


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def cast_seeds() -> dict[str, bytes]:
    """Casts of the reference broadcast that open (`CastOpener.open`), and ones that must not."""
    reference = bytes.fromhex(cast_vectors()["cast_hex"])
    other_epoch = BroadcastKey(epoch=bytes(16), key=CAST_KEY.key)
    return {
        "ok-reference": reference,
        "ok-empty-list": _sealed(pack([])),
        "ok-empty-plaintext": _sealed(b""),
        "ok-two-messages": _sealed(pack([pack({"op": "event"}), pack({"op": "presence"})])),
        "near-one-byte": b"\x00",
        "near-too-short": reference[:103],
        "near-counter-before": _sealed(pack([]), CAST_COUNTER - 1),
        "near-counter-after": _sealed(pack([]), CAST_COUNTER + 1),
        "near-other-epoch": _sealed(pack([]), key=other_epoch),
        "near-other-host": _sealed(pack([]), identity=IDENTITY),
        "near-flipped-ciphertext": _flip(reference, 30),
        "near-flipped-signature": _flip(reference, len(reference) - 1),
        "near-truncated-signature": reference[:-1],
        "near-trailing-byte": reference + b"\x00",
    }


def cast_messages_seeds() -> dict[str, bytes]:
    """Plaintexts of opened casts: a msgpack array of bin (`cast_messages`), and near misses."""
    reference = bytes.fromhex(cast_vectors()["cast_plaintext_hex"])
    item = pack({"op": "item", "item": ITEMS["message"].to_wire()})
    seeds = {
        "ok-reference": reference,
        "ok-empty-list": pack([]),
        "ok-several": pack([item, pack({"op": "event"}), b""]),
        "ok-array16": b"\xdc\x00\x01\xc4\x01x",
        "near-nil": b"\xc0",
        "near-not-msgpack": b"\xc1",
        "near-trailing-byte": pack([]) + b"\x00",
        "near-truncated": reference[:-1],
        "near-bad-utf8": b"\x91\xa1\xff",
        "near-ext-type": pack([msgpack.ExtType(1, b"x")]),
    }
    near: dict[str, Any] = {
        "near-str-message": ["text, not bytes"],
        "near-map": {"op": "item"},
        "near-nested-list": [[b"x"]],
        "near-int": 1,
        "near-nil-message": [None],
        "near-bytes-alone": b"x",
    }
    seeds.update({name: pack(value) for name, value in near.items()})
    return seeds


# -- application messages ------------------------------------------------------------------------


def _item(seq: int = 0, **fields: Any) -> Item:
    base: dict[str, Any] = {
        "conversation_id": "main",
        "seq": seq,
        "type": "message",
        "status": None,
        "response_id": None,
        "created_at": T0,
        "created_by": "alice",
        "data": {"role": "user", "text": "hello"},
    }
    base.update(fields)
    return Item(**base)


ITEMS: dict[str, Item] = {
    "message": _item(),
    "tool-call": _item(
        1,
        type="tool_call",
        status="in_progress",
        response_id="r1",
        created_by="agent",
        data={
            "tool_call_id": "t1",
            "title": "run ls",
            "content": [{"type": "diff", "path": "a.py", "old_text": "a", "new_text": "b"}],
        },
    ),
    "permission": _item(
        2,
        type="permission_request",
        status="action_required",
        created_by="agent",
        data={"request_id": "p1", "options": [{"option_id": "allow", "name": "Allow"}]},
    ),
    "corrupt": _item(3, type=CORRUPT_TYPE, data={"reason": "column data", "columns": ["data"]}),
    "numbers": _item(4, data={"i": -(2**63), "u": 2**64 - 1, "f": 0.5, "b": False, "n": None}),
}


PUSH_ENDPOINT = "https://fcm.googleapis.com/fcm/send/seed"
PUSH_P256DH = (
    ec.derive_private_key(1, ec.SECP256R1())
    .public_key()
    .public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
)
"""P-256's generator point: a fixed, valid `p256dh`."""
BROWSER = "seed-browser-id-0123"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def request_seeds() -> dict[str, bytes]:
    seeds = {
        "ok-subscribe": encode_request(Subscribe(after=None)),
        "ok-subscribe-after": encode_request(Subscribe(after=41)),
        "ok-subscribe-tail": encode_request(Subscribe(after=None, tail=50)),
        "ok-history": encode_request(History(before=800, limit=200)),
        "ok-history-default-limit": pack({"op": "history", "before": 1}),
        "ok-prompt": encode_request(Prompt(text="list the files")),
        "ok-permission": encode_request(PermissionAnswer(request_id="p1", option_id="allow")),
        "ok-cancel": encode_request(Cancel()),
        "ok-set-mode": encode_request(SetMode(mode_id="plan")),
        "ok-set-model": encode_request(SetModel(model_id="fast")),
        "ok-set-config": encode_request(SetConfig(config_id="think", value=True)),
        "ok-set-config-select": encode_request(SetConfig(config_id="effort", value="high")),
        "ok-input": encode_request(Input(data=b"ls\r")),
        "ok-resize": encode_request(Resize(cols=80, rows=24)),
        "ok-push-on": encode_request(
            PushOn(endpoint=PUSH_ENDPOINT, p256dh=PUSH_P256DH, auth=bytes(16), browser=BROWSER)
        ),
        "ok-push-off": encode_request(PushOff(endpoint=PUSH_ENDPOINT)),
        "ok-focus": encode_request(Focus(focused=True, browser=BROWSER)),
    }
    near = {
        "near-unknown-op": {"op": "shutdown"},
        "near-extra-field": {"op": "cancel", "now": True},
        "near-after-bool": {"op": "subscribe", "after": True},
        "near-after-low": {"op": "subscribe", "after": -2},
        "near-tail-with-after": {"op": "subscribe", "after": 41, "tail": 50},
        "near-tail-negative": {"op": "subscribe", "after": None, "tail": -1},
        "near-history-limit-zero": {"op": "history", "before": 10, "limit": 0},
        "near-history-limit-high": {"op": "history", "before": 10, "limit": 201},
        "near-history-before-missing": {"op": "history", "limit": 10},
        "near-history-before-negative": {"op": "history", "before": -1},
        "near-prompt-blank": {"op": "prompt", "text": "   "},
        "near-prompt-bytes": {"op": "prompt", "text": b"hi"},
        "near-input-str": {"op": "input", "data": "ls"},
        "near-resize-zero": {"op": "resize", "cols": 0, "rows": 24},
        "near-resize-huge": {"op": "resize", "cols": 80, "rows": 100_000},
        "near-set-config-int": {"op": "set_config", "config_id": "x", "value": 1},
        "near-permission-missing": {"op": "permission", "request_id": "p1"},
        "near-op-missing": {"text": "hi"},
        "near-push-on-off-curve": {
            "op": "push_on",
            "endpoint": PUSH_ENDPOINT,
            "p256dh": _b64url(b"\x04" + bytes(64)),
            "auth": _b64url(bytes(16)),
            "browser": BROWSER,
        },
        "near-push-on-auth-short": {
            "op": "push_on",
            "endpoint": PUSH_ENDPOINT,
            "p256dh": _b64url(PUSH_P256DH),
            "auth": _b64url(bytes(15)),
            "browser": BROWSER,
        },
        "near-focus-int": {"op": "focus", "focused": 1, "browser": BROWSER},
        "near-browser-short": {"op": "focus", "focused": True, "browser": "abc"},
    }
    seeds.update({name: pack(message) for name, message in near.items()})
    seeds["near-not-a-map"] = pack(["op", "cancel"])
    return seeds


def host_message_seeds() -> dict[str, bytes]:
    sandbox = SandboxInfo(enabled=True, writable=["/work"], network=False)
    seeds = {
        "ok-ready": encode(
            Ready(
                conversation_id="main",
                role="drive",
                name="alice",
                agent_name="demo",
                agent_kind="chat",
                sandbox=sandbox,
            )
        ),
        "ok-ready-terminal": encode(
            Ready(
                conversation_id="main",
                role="view",
                name="carol",
                agent_name="bash",
                agent_kind="terminal",
                sandbox=sandbox,
                terminal=TerminalSize(cols=120, rows=40),
            )
        ),
        "ok-ready-old-host": encode(
            Ready(
                conversation_id="main",
                role="view",
                name="bob",
                agent_name="bash",
                agent_kind="terminal",
            )
        ),
        "ok-snapshot": encode(
            Snapshot(
                items=[item.to_wire() for item in ITEMS.values()],
                last_seq=4,
                more=False,
                reset=True,
            )
        ),
        "ok-snapshot-tail": encode(
            Snapshot(
                items=[ITEMS["message"].to_wire()],
                last_seq=0,
                more=False,
                first_seq=0,
                earlier=True,
            )
        ),
        "ok-snapshot-context": encode(
            Snapshot(
                items=[ITEMS["message"].to_wire()],
                last_seq=9,
                more=True,
                first_seq=9,
                earlier=True,
                context=[ITEMS["tool-call"].to_wire()],
            )
        ),
        "ok-history": encode(
            HistoryPage(items=[item.to_wire() for item in ITEMS.values()], before=5, more=True)
        ),
        "ok-item": encode(ItemMessage(item=ITEMS["tool-call"].to_wire())),
        "ok-event": encode(
            EventMessage(
                event=Event(
                    conversation_id="main", kind="delta", data={"text": "hel", "response_id": "r"}
                ).to_wire()
            )
        ),
        "ok-presence": encode(
            PresenceMessage(
                members=[Member(name="alice", role="drive"), Member(name="host", role="host")],
                count=2,
            )
        ),
        "ok-presence-you": encode(
            PresenceMessage(
                members=[
                    Member(name="host", role="host", id=0),
                    Member(name="alice", role="drive", id=2),
                ],
                count=70,
                you=2,
            )
        ),
        "ok-presence-delta": encode(
            PresenceDelta(joined=[Member(name="bob", role="view", id=3)], left=[0], count=2)
        ),
    }
    seeds.update(
        {f"ok-error-{code}": encode(Error(code=code, message="no")) for code in ERROR_CODES}
    )
    near = {
        "near-unknown-op": {"op": "bye"},
        "near-op-int": {"op": 1},
        "near-ready-agent-missing": {"op": "ready", "conversation_id": "m", "role": "view"},
        "near-ready-sandbox-list": {
            "op": "ready",
            "conversation_id": "m",
            "role": "view",
            "name": "n",
            "agent": {"name": "a", "kind": "chat"},
            "sandbox": [],
        },
        "near-ready-terminal-zero": {
            "op": "ready",
            "conversation_id": "m",
            "role": "view",
            "name": "n",
            "agent": {"name": "a", "kind": "terminal"},
            "terminal": {"cols": 0, "rows": 24},
        },
        "near-ready-terminal-extra": {
            "op": "ready",
            "conversation_id": "m",
            "role": "view",
            "name": "n",
            "agent": {"name": "a", "kind": "terminal"},
            "terminal": {"cols": 80, "rows": 24, "x": 1},
        },
        "near-snapshot-seq-bool": {"op": "snapshot", "items": [], "last_seq": True, "more": 0},
        "near-snapshot-first-seq-str": {
            "op": "snapshot",
            "items": [],
            "last_seq": 3,
            "more": False,
            "first_seq": "0",
        },
        "near-history-before-missing": {"op": "history", "items": [], "more": False},
        "near-error-unknown-code": {"op": "error", "code": "oops", "message": "x"},
        "near-presence-not-list": {"op": "presence", "members": {"name": "a"}},
        "near-presence-both": {"op": "presence", "members": [], "joined": [], "left": []},
        "near-presence-delta-no-id": {
            "op": "presence",
            "joined": [{"name": "a", "role": "view"}],
            "left": [],
        },
        "near-presence-left-str": {"op": "presence", "joined": [], "left": ["0"], "count": 1},
        "near-presence-count-missing": {"op": "presence", "joined": [], "left": []},
        "near-presence-count-negative": {"op": "presence", "members": [], "count": -1},
        "near-snapshot-context-no-seq": {
            "op": "snapshot",
            "items": [],
            "last_seq": 3,
            "more": False,
            "context": [{"type": "plan"}],
        },
    }
    seeds.update({name: pack(message) for name, message in near.items()})
    return seeds


def item_seeds() -> dict[str, bytes]:
    seeds = {f"ok-{name}": pack(item.to_wire()) for name, item in ITEMS.items()}
    good = ITEMS["message"].to_wire()
    near: dict[str, Any] = {
        "near-unknown-field": {**good, "extra": 1},
        "near-missing-data": {k: v for k, v in good.items() if k != "data"},
        "near-id-mismatch": {**good, "id": "main:9"},
        "near-seq-negative": {**good, "seq": -1},
        "near-seq-bool": {**good, "seq": True},
        "near-time-naive": {**good, "created_at": "2025-03-01T09:30:00"},
        "near-time-junk": {**good, "created_at": "yesterday"},
        "near-type-empty": {**good, "type": ""},
        "near-data-bytes": {**good, "data": {"text": b"bytes"}},
        "near-data-list": {**good, "data": ["text"]},
        "near-float-nan": {**good, "data": {"n": float("nan")}},
        "near-deep": {**good, "data": _nested(70)},
    }
    seeds.update({name: pack(wire) for name, wire in near.items()})
    return seeds


def export_seeds() -> dict[str, bytes]:
    """Export files and lines (`tunnel log export`): chained items and a signed head."""
    from tunnel.host.audit import sign_head
    from tunnel.log.chain import Chain
    from tunnel.log.ndjson import item_line

    items = list(ITEMS.values())[:3]
    chain = Chain("main")
    lines: list[bytes] = []
    for seq, item in enumerate(items):
        item = _item(seq, type=item.type, status=item.status, data=item.data)
        prev = chain.head
        lines.append(item_line(item, prev=prev, hash=chain.add(item)))
    assert chain.head is not None
    signed = sign_head(IDENTITY, "main", chain.seq, chain.head, now=T0)
    signature = json.dumps(signed.to_wire(), separators=(",", ":")).encode() + b"\n"
    first = json.loads(lines[0])
    second = json.loads(lines[1])
    record = signed.to_wire()

    def line(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode() + b"\n"

    seeds = {
        "ok-export": b"".join(lines) + signature,
        "ok-item": lines[1],
        "ok-signature": signature,
        "ok-unchained": item_line(_item()),
        "ok-blank-lines": b"\n" + lines[0] + b"\n\n",
    }
    near = {
        "near-not-json": lines[0][:-10] + b"\n",
        "near-not-utf8": b"\xff" + lines[0],
        "near-prev-short": line({**second, "prev": second["prev"][:-2]}),
        "near-prev-at-seq-0": line({**first, "prev": second["prev"]}),
        "near-hash-missing": line({k: v for k, v in second.items() if k != "hash"}),
        "near-hash-not-hex": line({**second, "hash": "z" * 64}),
        "near-kind-unknown": line({**record, "kind": "head"}),
        "near-signature-missing-field": line({k: v for k, v in record.items() if k != "seq"}),
        "near-signature-short": line({**record, "signature": record["signature"][:-4]}),
        "near-signature-host-id": line({**record, "host_id": "x"}),
        "near-deep": line({**first, "data": _nested(70)}),
    }
    seeds.update(near)
    return seeds


def _nested(levels: int) -> dict[str, Any]:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return {"a": value}


# -- hellos and links ----------------------------------------------------------------------------


def hello_seeds() -> dict[str, bytes]:
    verifiers = {"view": bytes([1]) * 32, "drive": bytes([2]) * 32}
    host = {
        "role": "host",
        "version": PROTOCOL_VERSION,
        "pubkey": IDENTITY.public_key,
        "sig": IDENTITY.sign_hello(CHALLENGE, PUBLIC_URL),
        "capabilities": ["session", "terminal"],
        "verifiers": verifiers,
        "instance": bytes(range(INSTANCE_SIZE)),
        "replace": False,
    }
    teammate = teammate_hello(host_id=IDENTITY.host_id, token=bytes(32), name="alice")
    seeds = {
        "ok-host": pack(host),
        "ok-host-minimal": pack(
            {k: v for k, v in host.items() if k not in ("instance", "replace")}
        ),
        "ok-host-replace": pack({**host, "replace": True}),
        "ok-teammate": pack(teammate),
    }
    near: dict[str, Any] = {
        "near-host-bad-sig": {**host, "sig": bytes(64)},
        "near-host-short-key": {**host, "pubkey": bytes(31)},
        "near-host-same-verifiers": {**host, "verifiers": {"view": bytes(32), "drive": bytes(32)}},
        "near-host-unknown-field": {**host, "extra": 1},
        "near-host-replace-int": {**host, "replace": 1},
        "near-host-capability-int": {**host, "capabilities": [1]},
        "near-host-version-next": {**host, "version": PROTOCOL_VERSION + 1},
        "near-teammate-bad-host-id": {**teammate, "host_id": "A" * 26},
        "near-teammate-long-name": {**teammate, "name": "n" * 65},
        "near-teammate-token-str": {**teammate, "token": "token"},
        "near-relay-role": {**teammate, "role": "relay"},
    }
    seeds.update({name: pack(hello) for name, hello in near.items()})
    return seeds


def link_seeds() -> dict[str, bytes]:
    host_id = IDENTITY.host_id
    seeds = {
        f"ok-{role}-{scheme}": str(
            ShareLink(relay_url=url, host_id=host_id, role=role, secret=SECRET)
        ).encode()
        for role in ROLES
        for scheme, url in (
            ("https", "https://relay.example"),
            ("http-port", "http://127.0.0.1:8080"),
            ("ipv6", "https://[::1]:8443"),
        )
    }
    good = str(
        ShareLink(relay_url="https://relay.example", host_id=host_id, role="view", secret=SECRET)
    )
    head, _, fragment = good.partition("#")
    near = {
        "near-no-fragment": head,
        "near-admin-role": good.replace("#view.", "#admin."),
        "near-short-secret": good[:-4],
        "near-query": f"{head}?x=1#{fragment}",
        "near-ftp": good.replace("https://", "ftp://"),
        "near-bad-host-id": good.replace(host_id, host_id.upper()),
        "near-path": good.replace("/h/", "/x/"),
        "near-userinfo": good.replace("https://", "https://user@"),
    }
    seeds["ok-spaces-around"] = f"  {good}  \n".encode()
    seeds.update({name: text.encode() for name, text in near.items()})
    return seeds


def opening_seeds() -> dict[str, bytes]:
    """The host's answer to the vectors' opening and near misses; `open` metas and near misses."""
    vectors = reference_vectors()
    answer = bytes.fromhex(vectors["kx_answer_hex"])
    meta = {
        "role": "drive",
        "name": "alice",
        "salt": bytes.fromhex(vectors["salt_hex"]),
        "kx": bytes.fromhex(vectors["kx_teammate_key_hex"]),
        "proof": bytes.fromhex(vectors["kx_proof_hex"]),
        "sub": {
            "after": int(vectors["kx_sub_after"]),
            "conversation": vectors["kx_sub_conversation"],
        },
    }
    return {
        "ok-answer": answer,
        "ok-meta": pack(meta),
        "near-answer-host-nonce": answer[:16],
        "near-answer-short": answer[:-1],
        "near-answer-long": answer + b"\x00",
        "near-answer-flipped-key": _flip(answer, 0),
        "near-answer-flipped-kx": _flip(answer, 40),
        "near-answer-flipped-signature": _flip(answer, len(answer) - 1),
        "near-answer-zero-kx": answer[:32] + bytes(32) + answer[64:],
        "near-meta-no-kx": pack({k: v for k, v in meta.items() if k not in ("kx", "proof")}),
        "near-meta-short-kx": pack({**meta, "kx": meta["kx"][:-1]}),
        "near-meta-proof-str": pack({**meta, "proof": "text"}),
        "near-meta-salt-nil": pack({**meta, "salt": None}),
        "near-meta-sub-list": pack({**meta, "sub": [41]}),
        "near-meta-sub-after-str": pack({**meta, "sub": {"after": "41"}}),
    }


SEED_MAKERS: dict[str, Callable[[], dict[str, bytes]]] = {
    "frame": frame_seeds,
    "connection": connection_seeds,
    "request": request_seeds,
    "host_message": host_message_seeds,
    "item": item_seeds,
    "hello": hello_seeds,
    "link": link_seeds,
    "cast": cast_seeds,
    "cast_messages": cast_messages_seeds,
    "opening": opening_seeds,
    "export": export_seeds,
}


# -- dictionaries --------------------------------------------------------------------------------

# msgpack type bytes worth trying anywhere: nil, false, true, bin8, str8, uint16/32/64, int8/64,
# float64, array16, map16, the first fixmap and fixarray sizes.
_MSGPACK_MARKERS = [b"\xc0", b"\xc2", b"\xc3", b"\xc4", b"\xd9", b"\xcd", b"\xce", b"\xcf"]
_MSGPACK_MARKERS += [b"\xd0", b"\xd3", b"\xcb", b"\xdc", b"\xde", b"\x80", b"\x81", b"\x83"]
_MSGPACK_MARKERS += [b"\x90", b"\x91"]

_FRAME_WORDS = ["c", "k", "p", "path", "meta", "d", "code", "reason", "n", "g", *KINDS, "session"]
_FRAME_NUMBERS = [0, 1, 2, 3, MIN_CLOSE_CODE, MAX_CLOSE_CODE, 4000, 2**32 - 1, 2**32]
_REQUEST_WORDS = [
    "op",
    "subscribe",
    "after",
    "tail",
    "history",
    "before",
    "limit",
    "prompt",
    "text",
    "permission",
    "request_id",
    "option_id",
    "cancel",
    "set_mode",
    "mode_id",
    "set_model",
    "model_id",
    "set_config",
    "config_id",
    "value",
    "input",
    "data",
    "resize",
    "cols",
    "rows",
]
_HOST_MESSAGE_WORDS = [
    "op",
    "ready",
    "conversation_id",
    "role",
    "name",
    "agent",
    "kind",
    "sandbox",
    "terminal",
    "cols",
    "rows",
    "enabled",
    "writable",
    "network",
    "snapshot",
    "items",
    "last_seq",
    "more",
    "reset",
    "first_seq",
    "earlier",
    "history",
    "before",
    "item",
    "event",
    "presence",
    "members",
    "you",
    "joined",
    "left",
    "count",
    "id",
    "context",
    "seq",
    "error",
    "code",
    "message",
    "chat",
    "terminal",
    *ERROR_CODES,
    *ROLES,
]
_ITEM_WORDS = [
    "id",
    "conversation_id",
    "seq",
    "type",
    "status",
    "response_id",
    "created_at",
    "created_by",
    "data",
    "message",
    "tool_call",
    "reasoning",
    CORRUPT_TYPE,
    "completed",
    "in_progress",
    "action_required",
    "main:0",
    "2025-03-01T09:30:00.000000Z",
    "+00:00",
]
_HELLO_WORDS = [
    "role",
    "version",
    "host",
    "teammate",
    "relay",
    "pubkey",
    "sig",
    "capabilities",
    "verifiers",
    "instance",
    "replace",
    "host_id",
    "token",
    "name",
    *ROLES,
]
_LINK_TOKENS = [
    "https://",
    "http://",
    "/h/",
    "#view.",
    "#drive.",
    "relay.example",
    "127.0.0.1",
    "[::1]",
    ":443",
    ":8080",
    "?",
    "@",
    IDENTITY.host_id,
    "abcdefghijklmnopqrstuvwxyz234567",
]


_CAST_TOKENS = [
    CAST_KEY.epoch,
    *(counter.to_bytes(8, "big") for counter in range(CAST_COUNTER - 1, CAST_COUNTER + 2)),
    bytes(16),
]
"""A cast is fixed-size fields around a ciphertext: the epoch and the counters near the next."""


def _packed(words: Iterable[str], numbers: Iterable[int] = ()) -> list[bytes]:
    tokens = [pack(word) for word in words] + [pack(number) for number in numbers]
    return tokens + _MSGPACK_MARKERS


_EXPORT_WORDS = ["prev", "hash", "kind", "head_signature", "host_id", "public_key", "signature"]
_EXPORT_WORDS += ["signed_at"]

DICT_MAKERS: dict[str, Callable[[], list[bytes]]] = {
    "frame": lambda: _packed(_FRAME_WORDS, _FRAME_NUMBERS),
    "connection": lambda: _packed(_FRAME_WORDS, _FRAME_NUMBERS),
    "request": lambda: _packed(_REQUEST_WORDS, [-1, 0, 1, 1000, 1001, 2**63 - 1]),
    "host_message": lambda: _packed(_HOST_MESSAGE_WORDS, [-1, 0, 1]),
    "item": lambda: _packed(_ITEM_WORDS, [-1, 0, 1, -(2**63), 2**64 - 1]),
    "hello": lambda: _packed(_HELLO_WORDS, [PROTOCOL_VERSION, 32, 64]),
    "link": lambda: [token.encode() for token in _LINK_TOKENS],
    "cast": lambda: _CAST_TOKENS,
    "cast_messages": lambda: _packed(["op", "item", "event", "presence"]),
    "opening": lambda: _packed(
        [
            "role",
            "name",
            "salt",
            "kx",
            "proof",
            "sub",
            "after",
            "tail",
            "conversation",
            "drive",
            "view",
        ]
    ),
    "export": lambda: (
        [f'"{word}"'.encode() for word in [*_ITEM_WORDS, *_EXPORT_WORDS]]
        + [b"null", b"true", b"{", b"}", b"[", b"]", b":", b",", b"\n", b"0" * 64]
    ),
}


def dict_text(target: str, tokens: list[bytes]) -> str:
    """A libFuzzer dictionary: one `name="escaped bytes"` per line, duplicates dropped."""
    lines = [f"# {target}: tokens of its format, written by tests/fuzz/make_seeds.py"]
    seen: set[bytes] = set()
    for token in tokens:
        if token in seen:
            continue
        seen.add(token)
        escaped = "".join(
            chr(b) if 0x20 <= b < 0x7F and b not in b'"\\' else f"\\x{b:02x}" for b in token
        )
        lines.append(f't{len(seen)}="{escaped}"')
    return "\n".join(lines) + "\n"


def write(seeds_root: Path = SEEDS, dicts_root: Path = DICTS) -> None:
    """Write every target's seeds and dictionary under the given directories, replacing what
    was there."""
    for target, make in SEED_MAKERS.items():
        directory = seeds_root / target
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        for name, data in sorted(make().items()):
            (directory / name).write_bytes(data)
    dicts_root.mkdir(parents=True, exist_ok=True)
    for target, make_tokens in DICT_MAKERS.items():
        (dicts_root / f"{target}.dict").write_text(dict_text(target, make_tokens()))


def main() -> None:
    write()
    counts = {target: len(list((SEEDS / target).iterdir())) for target in SEED_MAKERS}
    print(f"wrote {sum(counts.values())} seeds ({counts}) and {len(DICT_MAKERS)} dictionaries")


if __name__ == "__main__":
    sys.exit(main())
