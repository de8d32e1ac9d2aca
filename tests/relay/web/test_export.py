"""The HTML file of `tunnel log export --html` and the bundler under it, without a browser: the
policy's hashes are those of the file's script and stylesheet, no module text can end or
re-open a script element, and an import or export form the bundler does not know is refused."""

from __future__ import annotations

import base64
import hashlib
import re
from datetime import UTC, datetime

import pytest

from tunnel.log.excerpt import Excerpt
from tunnel.log.item import Item
from tunnel.log.verify import verify_lines
from tunnel.relay.web import bundle as bundler
from tunnel.relay.web.bundle import BundleError, bundle
from tunnel.relay.web.export import export_html

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def sha256(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def test_the_policy_allows_exactly_the_files_script_and_stylesheet_and_fetches_nothing() -> None:
    item = Item(
        conversation_id="main", seq=0, type="message", status=None,
        response_id=None, created_at=NOW, created_by="a",
        data={"role": "user", "text": "</script><script>alert(1)</script><!--"},
    )  # fmt: skip
    excerpt = Excerpt(
        conversation_id="main", upto=None, items=[item], signatures=[],
        report=verify_lines([]),
    )  # fmt: skip
    page = export_html(excerpt, exported_at=NOW).decode()
    head = page[page.index("<head>") : page.rindex("</head>")]
    assert re.match(
        r'<head>\n<meta charset="utf-8">\n<meta http-equiv="Content-Security-Policy"', head
    )
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', head)
    assert policy is not None
    style = re.search(r"<style>(.*?)</style>", head, re.S)
    script = re.search(r'<script type="module">(.*?)</script>', head, re.S)
    assert style is not None
    assert script is not None
    assert policy[1].replace("&#x27;", "'") == (
        f"default-src 'none'; script-src 'sha256-{sha256(script[1])}'; "
        f"style-src 'sha256-{sha256(style[1])}'; img-src data:; base-uri 'none'; "
        "form-action 'none'"
    )
    # Three script elements' worth of tags: the data block's and the code's, nothing in between.
    assert len(re.findall(r"<script", page, re.I)) == 2
    assert len(re.findall(r"</script", page, re.I)) == 2
    assert "<!--" not in page
    assert "alert(1)" not in page


def modules(monkeypatch: pytest.MonkeyPatch, sources: dict[str, str]) -> None:
    monkeypatch.setattr(bundler, "_source", lambda path: sources[path])


def test_modules_come_after_what_they_import_and_bind_what_they_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    modules(monkeypatch, {
        "static/entry.js": 'import Purify from "./vendor/p.mjs";\n'
        'import { a, b as c } from "./x.js";\n',
        "static/x.js": 'import { q } from "./vendor/p.mjs";\nexport const a = 1;\n'
        "export async function b() {}\nexport class K {}\n",
        "static/vendor/p.mjs": "var z=1,y=2;const r=/<!--/;export{z as default,y as q};\n"
        "//# sourceMappingURL=p.mjs.map\n",
    })  # fmt: skip
    text = bundle("static/entry.js")
    order = [m[1] for m in re.finditer(r"^// (static/\S+)$", text, re.M)]
    assert order == ["static/vendor/p.mjs", "static/x.js", "static/entry.js"]
    assert "const Purify = __module_0.default;" in text
    assert "const { a, b: c } = __module_1;" in text
    assert "return { default: z, q: y };" in text
    assert "return { a, b, K };" in text
    assert "/\\x3C!--/" in text
    assert "sourceMappingURL" not in text
    assert "export" not in text.replace("exports", "")


@pytest.mark.parametrize(
    "source",
    [
        'import * as all from "./x.js";',
        'import "./x.js";',
        'import { a } from "https://example.com/a.js";',
        "export default function f() {}",
        'export { a } from "./x.js";',
        "const m = import('./x.js');",
        "const u = import.meta.url;",
        'import { a as } from "./x.js";',
    ],
)
def test_a_form_the_bundler_does_not_know_is_refused(
    monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    modules(monkeypatch, {"static/entry.js": source, "static/x.js": "export const a = 1;\n"})
    with pytest.raises(BundleError, match=r"static/entry\.js"):
        bundle("static/entry.js")


def test_a_cycle_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    modules(monkeypatch, {
        "static/a.js": 'import { b } from "./b.js";\nexport const a = 1;\n',
        "static/b.js": 'import { a } from "./a.js";\nexport const b = 1;\n',
    })  # fmt: skip
    with pytest.raises(BundleError, match="cycle"):
        bundle("static/a.js")
