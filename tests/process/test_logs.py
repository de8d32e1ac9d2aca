"""Log lines: what a record quotes from the wire cannot drive the terminal that shows it."""

from __future__ import annotations

import logging

from tunnel.process.logs import PrintableFormatter


def test_a_log_line_quoting_hostile_text_carries_no_terminal_control() -> None:
    record = logging.LogRecord(
        "tunnel.session",
        logging.INFO,
        __file__,
        1,
        "bad request from %s: %s",
        ("\x1b]52;c;aGk=\x07eve", "\x9b2J\u202eevil"),
        None,
    )
    line = PrintableFormatter("%(name)s: %(message)s").format(record)
    assert line == "tunnel.session: bad request from \\x1b]52;c;aGk=\\x07eve: \\x9b2J\\u202eevil"
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in line)
