"""`export_html(excerpt)`: a conversation as one self-contained HTML file that shows it as the page
does, offline (docs/web.md, "The exported transcript").

The file holds the page's stylesheet, its own modules bundled into one script (`bundle.py`,
entry `static/transcript.js`), and the excerpt as base64 of UTF-8 JSON in a data block: no item
text is ever in the markup, so none of it is parsed as HTML, whatever it holds. Its
Content-Security-Policy allows that script and those styles by their SHA-256 and nothing else: no
fetch, no connection, no image but `data:`, no form, no other script.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
from datetime import datetime
from importlib import resources
from typing import Any, Final

from tunnel.log.excerpt import Excerpt
from tunnel.log.item import format_time
from tunnel.relay.web.bundle import BundleError, bundle

__all__ = ["ENTRY", "export_html", "transcript_data"]

ENTRY: Final = "static/transcript.js"
"""The module the export runs; it imports the page's view, markdown, tools and verified mark."""

_STYLES: Final = ("static/app.css", "static/transcript.css")


def transcript_data(excerpt: Excerpt, *, exported_at: datetime) -> dict[str, Any]:
    """What the file embeds: the items and signatures as on the wire, and verify's report."""
    report = excerpt.report
    return {
        "conversation_id": excerpt.conversation_id,
        "upto": excerpt.upto,
        "exported_at": format_time(exported_at),
        "items": [item.to_wire() for item in excerpt.items],
        "signatures": [signature.to_wire() for signature in excerpt.signatures],
        "verification": {
            "ok": report.ok or not excerpt.items,
            "summary": excerpt.summary,
            "problems": report.problems,
            "problem_count": report.problem_count,
        },
    }


@functools.cache
def _assets() -> tuple[str, str]:
    """The bundled script and the stylesheet, once per process."""
    root = resources.files("tunnel.relay.web")
    css = "\n".join(root.joinpath(*path.split("/")).read_text(encoding="utf-8") for path in _STYLES)
    if "</" in css:
        raise BundleError("the stylesheet holds '</', which would end its <style> element")
    return bundle(ENTRY), css


def _source_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def content_security_policy(script: str, style: str) -> str:
    """The file's policy: this one script and this one stylesheet, by hash; nothing to fetch."""
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src {_source_hash(script)}",
            f"style-src {_source_hash(style)}",
            "img-src data:",
            "base-uri 'none'",
            "form-action 'none'",
        )
    )


def export_html(excerpt: Excerpt, *, exported_at: datetime) -> bytes:
    """The HTML file of `excerpt`, UTF-8."""
    script, style = _assets()
    payload = json.dumps(
        transcript_data(excerpt, exported_at=exported_at),
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8")
    data = base64.b64encode(payload).decode("ascii")
    title = html.escape(f"{excerpt.conversation_id} · agent-tunnel transcript")
    policy = html.escape(content_security_policy(script, style))
    # The policy's <meta> comes first: it guards only what the parser meets after it.
    page = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<meta name="viewport" content="width=device-width, initial-scale=1, viewport-fit=cover">
<meta name="referrer" content="no-referrer">
<title>{title}</title>
<link rel="icon" href="data:,">
<style>{style}</style>
<script type="application/json" id="transcript-data">{data}</script>
<script type="module">{script}</script>
</head>
<body>
<div id="app" data-testid="app">
  <noscript>This transcript needs JavaScript to show the conversation.</noscript>
</div>
</body>
</html>
"""
    return page.encode("utf-8")
