"""Coverage-guided fuzz targets (atheris) for every parser that reads untrusted bytes.

Run one by hand for longer: `python -m tests.fuzz.targets frame -runs=1000000`. Each target
feeds the fuzzer's bytes to one parser; anything but the parser's documented error is a crash.
A campaign starts from the target's seeds (`seeds/<target>/`) with its dictionary
(`dicts/<target>.dict`), both written by `make_seeds.py`; new inputs go to the first corpus
directory given, or to a temporary one (said on stderr).
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import atheris
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

with atheris.instrument_imports():
    import msgpack

    from tunnel.app.errors import BadRequest
    from tunnel.app.follower import cast_messages as parse_cast_messages
    from tunnel.app.host_messages import parse as parse_host_message
    from tunnel.app.requests import decode_request
    from tunnel.e2e.broadcast import CastError, CastOpener
    from tunnel.e2e.crypto import ShareLink, e2e_root
    from tunnel.e2e.identity import HostIdentity
    from tunnel.e2e.opening import (
        REFERENCE_SUBSCRIBE,
        OpeningError,
        TeammateOpening,
        check_early_subscribe,
        check_offer_fields,
    )
    from tunnel.handshake import HelloError, parse_host_hello, parse_teammate_hello
    from tunnel.log import Item
    from tunnel.log.ndjson import parse_record
    from tunnel.log.verify import verify_lines
    from tunnel.proto import DEFAULT_LIMITS, Connection, ProtocolError, Side, decode_frame
    from tunnel.proto.frames import _decode_fast, _decode_general


def vector_opening() -> TeammateOpening:
    """The teammate's opening of tests/vectors/crypto.json, whose answer is a seed."""
    return TeammateOpening(
        root=e2e_root(bytes(range(0x20)), _CAST_HOST.host_id),
        host_id=_CAST_HOST.host_id,
        role="drive",
        name="alice",
        private_key=X25519PrivateKey.from_private_bytes(bytes(range(0xB0, 0xD0))),
        salt=bytes(range(0x60, 0x70)),
        subscribe=REFERENCE_SUBSCRIBE,
    )


def _msgpack_value(data: bytes) -> Any:
    """The fuzzer's bytes as a msgpack value, or None when they are not msgpack at all."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:  # not msgpack: nothing to hand to the parser under test
        return None


def frame(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_frame(data)
    # The fast path for data and window frames reads only what msgpack reads, as msgpack does.
    fast = _decode_fast(data, DEFAULT_LIMITS.max_data_size)
    if fast is not None and len(data) <= (DEFAULT_LIMITS.max_message_size or len(data)):
        assert fast == _decode_general(data, DEFAULT_LIMITS), "the two decoding paths disagree"


def connection(data: bytes) -> None:
    # A relay reads data as views into the message: it must judge every input as the copying
    # path does, event for event.
    copied, viewed = (_connection_outcome(data, views) for views in (False, True))
    assert copied == viewed, "the viewing and the copying connection disagree"


def _connection_outcome(data: bytes, views: bool) -> tuple[list[Any], list[bytes], str]:
    # A whole link after its hello: every message either advances the state or fails the link.
    conn = Connection(Side.ACCEPTER, payload_views=views)
    conn.send_hello({})
    events: list[Any] = []
    sent: list[bytes] = []
    try:
        conn.receive_data(msgpack.packb({"c": None, "k": "hello", "p": {}}))
        for start in range(0, len(data), 64):
            conn.receive_data(data[start : start + 64])
            events += conn.events_received()
            sent += conn.data_to_send()
    except ProtocolError as exc:
        return events, sent, f"{type(exc).__name__} {exc.code}"
    return events, sent, ""


def request(data: bytes) -> None:
    with contextlib.suppress(BadRequest):
        decode_request(data)


def host_message(data: bytes) -> None:
    with contextlib.suppress(BadRequest):
        parse_host_message(data)


def item(data: bytes) -> None:
    value = _msgpack_value(data)
    with contextlib.suppress(ValueError):
        Item.from_wire(value)


def hello(data: bytes) -> None:
    value = _msgpack_value(data)
    if not isinstance(value, dict):
        return
    with contextlib.suppress(HelloError):
        parse_teammate_hello(value)
    with contextlib.suppress(HelloError):
        parse_host_hello(
            value, challenge=bytes(32), public_url="http://127.0.0.1:1", authorized_keys=None
        )


def link(data: bytes) -> None:
    with contextlib.suppress(ValueError):
        ShareLink.parse(data.decode("utf-8", "replace"))


# The broadcast of tunnel/e2e/broadcast.py's reference vectors, whose casts the seeds are.
_CAST_HOST = HostIdentity.from_seed(bytes(range(0x20, 0x40)))


def cast(data: bytes) -> None:
    # A fresh opener per input: one refused cast ends an opener for good.
    opener = CastOpener(
        host_id=_CAST_HOST.host_id,
        public_key=_CAST_HOST.public_key,
        epoch=bytes(range(0x80, 0x90)),
        key=bytes(range(0x90, 0xB0)),
        counter=5,
    )
    with contextlib.suppress(CastError):
        assert type(opener.open(data)) is bytes


def cast_messages(data: bytes) -> None:
    with contextlib.suppress(CastError):
        messages = parse_cast_messages(data)
        assert type(messages) is list
        assert all(type(m) is bytes for m in messages)


def opening(data: bytes) -> None:
    # The two untrusted inputs of a channel opening: an `open` meta at the host, and the host's
    # answer at the teammate (a fresh opening per input: finishing one forgets its key).
    value = _msgpack_value(data)
    if isinstance(value, dict):
        with contextlib.suppress(OpeningError):
            check_offer_fields(value)
        with contextlib.suppress(OpeningError):
            check_early_subscribe(value)
    with contextlib.suppress(OpeningError):
        crypto = vector_opening().finish(data)
        assert crypto.send.counter == 0


def export(data: bytes) -> None:
    # An export file as `tunnel log verify` reads it: each line's record, then the whole file,
    # whose check never raises.
    for line in io.BytesIO(data):
        with contextlib.suppress(ValueError):
            parse_record(line)
    report = verify_lines(io.BytesIO(data))
    assert report.problem_count >= len(report.problems)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "frame": frame,
    "connection": connection,
    "request": request,
    "host_message": host_message,
    "item": item,
    "hello": hello,
    "link": link,
    "cast": cast,
    "cast_messages": cast_messages,
    "opening": opening,
    "export": export,
}


HERE = Path(__file__).resolve().parent
SEEDS = HERE / "seeds"
DICTS = HERE / "dicts"


def libfuzzer_args(target: str, args: list[str]) -> list[str]:
    """libFuzzer's arguments for a campaign on `target`: `args`, then the target's dictionary
    (unless `-dict=` is given) and its seeds, as a corpus directory after the first.

    libFuzzer writes what it finds into the first corpus directory, so the seeds never come
    first: without a directory in `args`, a temporary one is.
    """
    flags = [a for a in args if a.startswith("-")]
    corpora = [a for a in args if not a.startswith("-")]
    if not corpora:
        corpora = [tempfile.mkdtemp(prefix=f"fuzz-{target}-")]
        print(f"new inputs go to {corpora[0]}", file=sys.stderr)
    if not any(flag.startswith("-dict=") for flag in flags):
        flags.append(f"-dict={DICTS / f'{target}.dict'}")
    return [*flags, *corpora, str(SEEDS / target)]


def main() -> None:
    name = sys.argv[1]
    atheris.Setup([sys.argv[0], *libfuzzer_args(name, sys.argv[2:])], TARGETS[name])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
