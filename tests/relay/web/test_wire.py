"""wire.js: generated from Python, served like an asset, and the page's only copy of the vocabulary.

The values themselves are compared with Python in chromium (test_web_wire.py); here: the module's
text, how it is served, and a scan of the page's modules for constants written by hand again.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tunnel.proto.codes import CloseCode
from tunnel.relay import web
from tunnel.relay.web import build_id, static_response
from tunnel.relay.web.wire import WIRE_MODULE_NAME, wire_module, wire_values

STATIC = Path(web.__file__).resolve().parent / "static"
PAGE_MODULES = sorted(STATIC.glob("*.js"))

# Names the page used for its own copies before wire.js existed; none may come back.
RETIRED_NAMES = {
    "Code",
    "FINAL",
    "INITIAL_WINDOW",
    "MAX_MESSAGE_SIZE",
    "SALT_LENGTH",
    "SECRET_LENGTH",
    "HOST_NONCE_LENGTH",
    "TOKEN_INFO",
    "ROOT_INFO",
    "BACKOFF_FIRST_MS",
    "BACKOFF_MAX_MS",
}

# Numbers in the close-code range that are not close codes, each with what it is. Matched on the
# whole line (strings and comments removed), so they cannot hide a close code written elsewhere.
NOT_CLOSE_CODES = {
    ("frames.js", "maxArrayLength: 4096,"): "a bound on msgpack arrays in a frame",
    ("frames.js", "maxMapLength: 4096,"): "a bound on msgpack maps in a frame",
    ("link.js", "const MAX_OUTBOX = 4096;"): "messages waiting for window",
    (
        "view.js",
        "const seconds = Math.max(1, Math.round(retryInMs / 1000));",
    ): "milliseconds per second",
}

# A `/` after one of these (or at the start) begins a regex literal, not a division.
_REGEX_AFTER = re.compile(r"(?:^|[(,=:\[!&|?{};+\-*%<>~^]|(?<![\w$])(?:return|typeof|case|of|in))$")


class _JsScanner:
    """Splits JS source into code (comments, strings and regex literals blanked) and strings.

    Good enough for the page's own modules: line structure is kept, template literals' `${...}`
    parts stay code, and `/` starts a regex literal where an expression may start.
    """

    def __init__(self, source: str) -> None:
        self.src = source
        self.i = 0
        self.code: list[str] = []
        self.strings: list[str] = []

    def scan(self) -> tuple[str, list[str]]:
        self._code(until_brace=False)
        return "".join(self.code), self.strings

    def _regex_may_start(self) -> bool:
        return _REGEX_AFTER.search("".join(self.code).rstrip()) is not None

    def _code(self, *, until_brace: bool) -> None:
        depth = 0
        src = self.src
        while self.i < len(src):
            ch = src[self.i]
            two = src[self.i : self.i + 2]
            if two == "//":
                end = src.find("\n", self.i)
                self.i = len(src) if end < 0 else end
            elif two == "/*":
                end = src.index("*/", self.i + 2)
                self.code.append("\n" * src.count("\n", self.i, end))
                self.i = end + 2
            elif ch in "'\"":
                self._quoted(ch)
            elif ch == "`":
                self._template()
            elif ch == "/" and self._regex_may_start():
                self._regex()
            elif ch == "{":
                depth += 1
                self.code.append(ch)
                self.i += 1
            elif ch == "}":
                if until_brace and depth == 0:
                    self.i += 1
                    return
                depth -= 1
                self.code.append(ch)
                self.i += 1
            else:
                self.code.append(ch)
                self.i += 1

    def _quoted(self, quote: str) -> None:
        start = self.i + 1
        self.i = start
        while self.src[self.i] != quote:
            self.i += 2 if self.src[self.i] == "\\" else 1
        self.strings.append(self.src[start : self.i])
        self.code.append(quote * 2)
        self.i += 1

    def _template(self) -> None:
        self.i += 1
        text: list[str] = []
        self.code.append("`")
        while self.src[self.i] != "`":
            if self.src[self.i] == "\\":
                text.append(self.src[self.i : self.i + 2])
                self.i += 2
            elif self.src.startswith("${", self.i):
                self.i += 2
                self.code.append("${")
                self._code(until_brace=True)
                self.code.append("}")
            else:
                if self.src[self.i] == "\n":
                    self.code.append("\n")
                text.append(self.src[self.i])
                self.i += 1
        self.strings.append("".join(text))
        self.code.append("`")
        self.i += 1

    def _regex(self) -> None:
        self.i += 1
        in_class = False
        while True:
            ch = self.src[self.i]
            if ch == "\\":
                self.i += 2
                continue
            if ch == "[":
                in_class = True
            elif ch == "]":
                in_class = False
            elif ch == "/" and not in_class:
                break
            self.i += 1
        self.i += 1
        while self.i < len(self.src) and self.src[self.i].isalpha():
            self.i += 1
        self.code.append("/re/")


def scan(path: Path) -> tuple[str, list[str]]:
    return _JsScanner(path.read_text()).scan()


def normalized(name: str) -> str:
    return name.replace("_", "").lower()


def test_wire_js_is_deterministic_and_says_where_it_comes_from() -> None:
    text = wire_module().decode()
    assert wire_module.__wrapped__() == wire_module()
    assert text.startswith(f"// {WIRE_MODULE_NAME}: generated from the Python constants by ")
    assert "tunnel.relay.web.wire" in text.splitlines()[0]
    exported = re.findall(r"^export const (\w+) = ", text, flags=re.MULTILINE)
    assert sorted(exported) == sorted(wire_values())
    # Within each group (a comment line, then its exports) names are sorted.
    for group in text.split("\n\n")[1:]:
        names = re.findall(r"^export const (\w+)", group, flags=re.MULTILINE)
        assert names == sorted(names)
        assert group.startswith("// tunnel.")
    # Object keys are sorted too: the CloseCode line lists its names alphabetically.
    close_codes = re.search(r"^export const CloseCode = Object\.freeze\((.*)\);$", text, re.M)
    assert close_codes is not None
    keys = re.findall(r'"(\w+)":', close_codes.group(1))
    assert keys == sorted(code.name for code in CloseCode)


def test_wire_js_is_served_like_the_other_assets() -> None:
    plain = static_response("/static/wire.js")
    versioned = static_response(f"/static/{build_id()}/wire.js")
    assert plain is not None
    assert versioned is not None
    other = static_response("/static/app.js")
    assert other is not None
    assert plain[2] == versioned[2] == wire_module()
    assert dict(plain[1]) == dict(other[1])
    assert dict(versioned[1])["Cache-Control"] == "public, max-age=31536000, immutable"
    assert (
        dict(versioned[1])["Content-Security-Policy"]
        == "default-src 'none'; frame-ancestors 'none'"
    )
    # Only at the top of static/: never as a vendored file or in a subfolder.
    assert static_response("/static/vendor/wire.js") is None
    assert static_response("/static/x/wire.js") is None


def test_wire_js_is_never_a_file_in_the_package() -> None:
    assert not (STATIC / WIRE_MODULE_NAME).exists()
    assert not (STATIC.parent / WIRE_MODULE_NAME).exists()


def test_build_id_changes_with_wire_js(monkeypatch: pytest.MonkeyPatch) -> None:
    before = build_id()
    changed = wire_module() + b"// another constant\n"
    monkeypatch.setitem(web._GENERATED, WIRE_MODULE_NAME, lambda: changed)
    build_id.cache_clear()
    try:
        assert build_id() != before
    finally:
        monkeypatch.undo()
        build_id.cache_clear()
    assert build_id() == before


def test_the_scanner_finds_definitions_numbers_and_strings() -> None:
    # The scan below would pass vacuously if the scanner lost code; it must see through this.
    source = (
        "// const Hidden = 4000;\n"
        'const A = "agent-tunnel/v1 e2e"; /* 4001 */\n'
        "const re = /[/'\"]4002/g, b = x / 4003;\n"
        "export const B = `t${4004}`;\n"
    )
    code, strings = _JsScanner(source).scan()
    assert re.findall(r"\bconst\s+(\w+)", code) == ["A", "re", "B"]
    assert re.findall(r"\d{4}", code) == ["4003", "4004"]
    assert strings == ["agent-tunnel/v1 e2e", "t"]


def test_page_modules_define_none_of_the_wire_constants() -> None:
    assert len(PAGE_MODULES) >= 8
    wire = {normalized(name): name for name in wire_values()}
    found = []
    for path in PAGE_MODULES:
        code, _strings = scan(path)
        for name in re.findall(r"\b(?:const|let|var|function\*?|class)\s+([A-Za-z_$][\w$]*)", code):
            if normalized(name) in wire or name in RETIRED_NAMES:
                found.append(f"{path.name}: {name}")
    assert found == []


def test_page_modules_write_no_close_code_by_hand() -> None:
    codes = {int(code) for code in CloseCode}
    found = []
    for path in PAGE_MODULES:
        code, _strings = scan(path)
        for line in code.splitlines():
            for literal in re.findall(r"(?<![\w$.])(\d+)(?![\w.])", line):
                value = int(literal)
                if not (value in codes or 4000 <= value <= 4999):
                    continue
                if (path.name, line.strip()) not in NOT_CLOSE_CODES:
                    found.append(f"{path.name}: {line.strip()}")
    assert found == []


def test_page_modules_spell_no_key_label_or_host_id_pattern() -> None:
    values = wire_values()
    labels = {values[name] for name in ("RELAY_TOKEN_INFO", "E2E_INFO", "UP_INFO", "DOWN_INFO")}
    pattern = values["HOST_ID_PATTERN"]
    assert isinstance(pattern, str)
    found = []
    for path in PAGE_MODULES:
        _code, strings = scan(path)
        found += [f"{path.name}: {s!r}" for s in strings if s in labels or pattern in s]
        if pattern in path.read_text():
            found.append(f"{path.name}: the host id pattern")
    assert found == []
