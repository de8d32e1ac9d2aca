"""`WaitingRequests` and `TerminalSignals`: one bell per request the first time it waits, never
again; the count in the prompt and the title; the title only on a terminal that is not dumb, and
given back on close."""

from __future__ import annotations

import io

from tunnel.terminal.notify import MAX_REMEMBERED, TerminalSignals, WaitingRequests


class Terminal(io.StringIO):
    """What a terminal received; it says it is one."""

    def isatty(self) -> bool:
        return True


def test_a_request_is_new_once_however_often_it_is_seen_waiting() -> None:
    waiting = WaitingRequests()
    assert waiting.update(["r1"]) == 1
    assert waiting.update(["r1"]) == 0  # a snapshot, a reconnect, a resume
    assert waiting.update(["r1", "r2", "r2"]) == 1
    assert waiting.count == 2
    assert waiting.prompt("> ") == "[2 waiting] > "
    assert waiting.update([]) == 0
    assert waiting.prompt("> ") == "> "
    assert waiting.update(["r2"]) == 0  # answered, then seen again: never rings twice


def test_announced_requests_are_remembered_within_a_bound() -> None:
    waiting = WaitingRequests()
    waiting.update(f"r{n}" for n in range(MAX_REMEMBERED + 10))
    assert len(waiting._announced) == MAX_REMEMBERED
    assert waiting.update([f"r{MAX_REMEMBERED + 9}"]) == 0


def test_signals_ring_once_per_new_request_and_show_the_count_in_the_title() -> None:
    out = Terminal()
    signals = TerminalSignals(out, program="tunnel attach", environ={"TERM": "xterm"})
    waiting = WaitingRequests()
    signals.show(waiting, waiting.update([]))
    assert out.getvalue() == ""  # the terminal's own title stays until a request waits
    signals.show(waiting, waiting.update(["a", "b"]))
    assert out.getvalue() == "\a\a\x1b[22;0t\x1b]2;[2 waiting] tunnel attach\x07"
    out.truncate(0)
    out.seek(0)
    signals.show(waiting, waiting.update(["a", "b"]))
    assert out.getvalue() == ""
    signals.show(waiting, waiting.update([]))
    assert out.getvalue() == "\x1b]2;tunnel attach\x07"
    out.truncate(0)
    out.seek(0)
    signals.close()
    assert out.getvalue() == "\x1b]2;\x07\x1b[23;0t"
    signals.close()
    assert out.getvalue() == "\x1b]2;\x07\x1b[23;0t"


def test_the_title_counts_the_requests_waiting_elsewhere_without_naming_them() -> None:
    out = Terminal()
    signals = TerminalSignals(out, program="tunnel attach", environ={"TERM": "xterm"})
    waiting = WaitingRequests()
    waiting.elsewhere = 2
    signals.show(waiting, 1)
    assert out.getvalue() == "\a\x1b[22;0t\x1b]2;[2 waiting elsewhere] tunnel attach\x07"
    out.truncate(0)
    out.seek(0)
    signals.show(waiting, waiting.update(["a"]))
    assert out.getvalue() == "\a\x1b]2;[1 waiting] [2 waiting elsewhere] tunnel attach\x07"
    # The prompt is the surface's: the count of those elsewhere comes from their list.
    assert waiting.prompt("> ") == "[1 waiting] > "


def test_no_bell_keeps_the_title_and_a_dumb_terminal_gets_the_bell_only() -> None:
    quiet = Terminal()
    signals = TerminalSignals(quiet, program="p", bell=False, environ={"TERM": "xterm"})
    waiting = WaitingRequests()
    signals.show(waiting, waiting.update(["a"]))
    assert "\a" not in quiet.getvalue().replace("\x07", "")  # the OSC's own end is not a bell
    assert quiet.getvalue() == "\x1b[22;0t\x1b]2;[1 waiting] p\x07"
    for term in ("dumb", ""):
        dumb = Terminal()
        signals = TerminalSignals(dumb, program="p", environ={"TERM": term})
        waiting = WaitingRequests()
        signals.show(waiting, waiting.update(["a"]))
        signals.close()
        assert dumb.getvalue() == "\a"


def test_nothing_is_written_where_the_output_is_not_a_terminal() -> None:
    out = io.StringIO()
    signals = TerminalSignals(out, program="p", environ={"TERM": "xterm"})
    waiting = WaitingRequests()
    signals.show(waiting, waiting.update(["a"]))
    signals.close()
    assert out.getvalue() == ""
