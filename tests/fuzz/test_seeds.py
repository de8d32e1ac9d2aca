"""The committed seeds and dictionaries are what `make_seeds.py` writes, and mean what their names
say: every `ok-*` seed parses, every `near-*` seed is refused with the parser's own error."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path

import msgpack
import pytest

from tunnel.app.errors import BadRequest
from tunnel.app.follower import cast_messages
from tunnel.app.host_messages import parse as parse_host_message
from tunnel.app.requests import decode_request
from tunnel.e2e.broadcast import CastError, CastOpener
from tunnel.e2e.broadcast import reference_vectors as cast_vectors
from tunnel.e2e.crypto import ShareLink
from tunnel.e2e.opening import OpeningError, check_early_subscribe, check_offer_fields
from tunnel.handshake import HelloError, parse_host_hello, parse_teammate_hello
from tunnel.log import Item
from tunnel.log.ndjson import parse_record
from tunnel.proto import Connection, ProtocolError, Side, decode_frame

from . import make_seeds

Parse = Callable[[bytes], object]


def _connection(data: bytes) -> None:
    # As the `connection` target feeds it, without hiding the protocol's errors.
    conn = Connection(Side.ACCEPTER)
    conn.send_hello({})
    conn.receive_data(msgpack.packb({"c": None, "k": "hello", "p": {}}))
    for start in range(0, len(data), make_seeds.CHUNK):
        conn.receive_data(data[start : start + make_seeds.CHUNK])
        conn.events_received()
        conn.data_to_send()


def _item(data: bytes) -> Item:
    return Item.from_wire(msgpack.unpackb(data, raw=False, strict_map_key=False))


def _hello(data: bytes) -> object:
    value = msgpack.unpackb(data, raw=False)
    with contextlib.suppress(HelloError):
        return parse_teammate_hello(value)
    return parse_host_hello(
        value,
        challenge=make_seeds.CHALLENGE,
        public_url=make_seeds.PUBLIC_URL,
        authorized_keys=None,
    )


def _opening(data: bytes) -> object:
    # A meta (a msgpack map) at the host, or else an answer at the teammate of the vectors.
    try:
        value = msgpack.unpackb(data, raw=False)
    except Exception:  # not msgpack: an answer
        value = None
    if isinstance(value, dict):
        return check_offer_fields(value), check_early_subscribe(value)
    from .targets import vector_opening

    return vector_opening().finish(data)


def _cast(data: bytes) -> bytes:
    opener = CastOpener(
        host_id=make_seeds.CAST_IDENTITY.host_id,
        public_key=make_seeds.CAST_IDENTITY.public_key,
        epoch=make_seeds.CAST_KEY.epoch,
        key=make_seeds.CAST_KEY.key,
        counter=make_seeds.CAST_COUNTER,
    )
    return opener.open(data)


def _export(data: bytes) -> None:
    for line in data.splitlines(keepends=True):
        if line.strip():
            parse_record(line)


# Each target's parser, and the error it refuses input with.
PARSERS: dict[str, tuple[Parse, type[Exception]]] = {
    "frame": (decode_frame, ProtocolError),
    "connection": (_connection, ProtocolError),
    "request": (decode_request, BadRequest),
    "host_message": (parse_host_message, BadRequest),
    "item": (_item, ValueError),
    "hello": (_hello, HelloError),
    "link": (lambda data: ShareLink.parse(data.decode()), ValueError),
    "cast": (_cast, CastError),
    "cast_messages": (cast_messages, CastError),
    "opening": (lambda data: _opening(data), OpeningError),
    "export": (_export, ValueError),
}


def test_every_target_has_seeds_and_a_dictionary() -> None:
    from .targets import TARGETS

    assert set(make_seeds.SEED_MAKERS) == set(TARGETS) == set(PARSERS)
    for target in TARGETS:
        names = [p.name for p in (make_seeds.SEEDS / target).iterdir()]
        assert any(n.startswith("ok-") for n in names), target
        assert any(n.startswith("near-") for n in names), target
        assert (make_seeds.DICTS / f"{target}.dict").is_file()


def test_the_committed_files_are_what_make_seeds_writes(tmp_path: Path) -> None:
    make_seeds.write(tmp_path / "seeds", tmp_path / "dicts")
    for fresh, committed in (
        (tmp_path / "seeds", make_seeds.SEEDS),
        (tmp_path / "dicts", make_seeds.DICTS),
    ):
        written, kept = _files(fresh), _files(committed)
        differ = sorted(str(name) for name in written.keys() ^ kept.keys())
        differ += sorted(str(n) for n in written.keys() & kept.keys() if written[n] != kept[n])
        assert not differ, (
            f"tests/fuzz/{committed.name}: {differ} are not what make_seeds writes now; run "
            "`python -m tests.fuzz.make_seeds` and commit what it writes"
        )


def _files(root: Path) -> dict[Path, bytes]:
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("target", sorted(PARSERS))
def test_ok_seeds_parse_and_near_seeds_are_refused(target: str) -> None:
    parse, refusal = PARSERS[target]
    wrong: list[str] = []
    for seed in sorted((make_seeds.SEEDS / target).iterdir()):
        try:
            parse(seed.read_bytes())
        except refusal as exc:
            if seed.name.startswith("ok-"):
                wrong.append(f"{seed.name} is refused: {exc}")
        else:
            if not seed.name.startswith("ok-"):
                wrong.append(f"{seed.name} parses")
    assert not wrong


def test_the_cast_seeds_are_casts_of_the_reference_broadcast() -> None:
    vectors = cast_vectors()
    seeds = make_seeds.SEEDS
    assert (seeds / "cast" / "ok-reference").read_bytes() == bytes.fromhex(vectors["cast_hex"])
    assert _cast(bytes.fromhex(vectors["cast_hex"])) == bytes.fromhex(vectors["cast_plaintext_hex"])
    reference = (seeds / "cast_messages" / "ok-reference").read_bytes()
    assert reference == bytes.fromhex(vectors["cast_plaintext_hex"])
    assert len(cast_messages(reference)) == 1


def test_dictionaries_are_in_libfuzzer_format() -> None:
    entry = re.compile(r'^[A-Za-z0-9_]+="(?:[\x20-\x21\x23-\x5b\x5d-\x7e]|\\x[0-9a-f]{2})+"$')
    for path in make_seeds.DICTS.iterdir():
        lines = path.read_text().splitlines()
        assert lines[0].startswith("# ")
        bad = [line for line in lines[1:] if not entry.match(line)]
        assert not bad, (path.name, bad)
