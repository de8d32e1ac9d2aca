"""`bundle(entry)`: the page's ES modules that `entry` imports, as one script for an HTML file.

A file opened from disk may load nothing (its CSP says `default-src 'none'`), so an export
cannot import `./view.js`: its modules travel inside it. Each module becomes a function scope
that returns its exports, called once, in dependency order; an import becomes a destructuring of
the exporting module's result. Only the forms the page and its vendored modules use are
understood (named and default imports from a relative path, `export` before a declaration,
`export { a as b }` lists); any other import or export form is refused with `BundleError`, so a
new form is noticed when the export is tested, never shipped half-bundled.

No text of a module is parsed as HTML by the browser either: every `<script`, `</script` and
`<!--` (they occur in the vendored parsers' regular expressions and strings) is written
`\\x3C...`, which means the same inside a string or a regular expression literal.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from posixpath import dirname, join, normpath
from typing import Final

from tunnel.relay.web.wire import WIRE_MODULE_NAME, wire_module

__all__ = ["BundleError", "bundle"]


class BundleError(ValueError):
    """A module of the page cannot be bundled: a missing file or an import form not handled."""


_IMPORT: Final = re.compile(
    r"""^import\s+(?:(?P<default>[\w$]+)|\{(?P<names>[^}]*)\})\s+from\s+"(?P<path>[^"]+)";?""",
    re.M,
)
_EXPORT_DECLARATION: Final = re.compile(
    r"^export\s+(?=(?:async\s+)?(?:function\b\*?|class\b|const\b|let\b|var\b))", re.M
)
_DECLARED_NAME: Final = re.compile(
    r"(?:async\s+)?(?:function\s*\*?|class|const|let|var)\s+([\w$]+)"
)
# `export { a as b };`: at a line's start in the page's modules, after a `;` in a minified one.
_EXPORT_LIST: Final = re.compile(
    r"(?:^|(?<=;))export\s*\{(?P<names>[^}]*)\}(?!\s*from\b)\s*;?", re.M
)
_SOURCE_MAP: Final = re.compile(r"^//# sourceMappingURL=.*$", re.M)
# What is left of an import or export the patterns above did not take.
_LEFT_OVER: Final = re.compile(
    r"(?:^|[;}])\s*(?:import(?:\s+[\w$]|\s*[{*\"'])|export\b)|\bimport\s*\(|\bimport\.meta\b", re.M
)
_HTML_OPENERS: Final = re.compile(r"<(?=!--|/?script)", re.I)
_NAME: Final = re.compile(r"[\w$]+")


@dataclass(frozen=True, slots=True)
class _Module:
    path: str
    body: str
    imports: tuple[tuple[str, str], ...]
    """(binding statement with {module} for the exporter's variable, the exporter's path)."""
    exports: tuple[tuple[str, str], ...]
    """(exported name, local name)."""


def _root() -> Traversable:
    return resources.files("tunnel.relay.web")


def _source(path: str) -> str:
    """The text of a module by its URL path under /static/ (`static/view.js`), as the relay
    serves it: `static/vendor/` is the vendor folder, `static/wire.js` is generated."""
    if path == f"static/{WIRE_MODULE_NAME}":
        return wire_module().decode("utf-8")
    parts = path.split("/")
    if parts[:2] == ["static", "vendor"]:
        parts = parts[1:]
    entry = _root().joinpath(*parts)
    if not entry.is_file():
        raise BundleError(f"{path}: no such module")
    return entry.read_text(encoding="utf-8")


def _pairs(names: str, where: str) -> list[tuple[str, str]]:
    """`a, b as c` -> [(a, a), (b, c)]: (the name in the list, the name after `as`)."""
    pairs: list[tuple[str, str]] = []
    for part in names.split(","):
        words = part.split()
        if not words:
            continue
        if len(words) == 1 and _NAME.fullmatch(words[0]):
            pairs.append((words[0], words[0]))
        elif len(words) == 3 and words[1] == "as" and all(_NAME.fullmatch(w) for w in words[::2]):
            pairs.append((words[0], words[2]))
        else:
            raise BundleError(f"{where}: cannot bundle the import or export list {names.strip()!r}")
    return pairs


def _parse(path: str) -> _Module:
    text = _SOURCE_MAP.sub("", _source(path))
    imports: list[tuple[str, str]] = []

    def take_import(match: re.Match[str]) -> str:
        target = match["path"]
        if not target.startswith("./") and not target.startswith("../"):
            raise BundleError(f"{path}: cannot bundle the import of {target!r}")
        resolved = normpath(join(dirname(path), target))
        if match["default"]:
            binding = f"const {match['default']} = {{module}}.default;"
        else:
            fields = [
                name if name == local else f"{name}: {local}"
                for name, local in _pairs(match["names"], path)
            ]
            binding = f"const {{ {', '.join(fields)} }} = {{module}};"
        imports.append((binding, resolved))
        return ""

    text = _IMPORT.sub(take_import, text)
    exports: list[tuple[str, str]] = []

    def take_list(match: re.Match[str]) -> str:
        exports.extend((exported, local) for local, exported in _pairs(match["names"], path))
        return ""

    text = _EXPORT_LIST.sub(take_list, text)
    for match in _EXPORT_DECLARATION.finditer(text):
        declared = _DECLARED_NAME.match(text, match.end())
        if declared is None:
            raise BundleError(f"{path}: cannot bundle the export at offset {match.start()}")
        exports.append((declared[1], declared[1]))
    text = _EXPORT_DECLARATION.sub("", text)
    if left := _LEFT_OVER.search(text):
        raise BundleError(f"{path}: cannot bundle {left[0].strip()!r}")
    return _Module(path=path, body=text, imports=tuple(imports), exports=tuple(exports))


def _in_order(entry: str, parse: Callable[[str], _Module]) -> list[_Module]:
    """`entry` and every module it imports, each after the modules it imports."""
    done: dict[str, _Module] = {}
    visiting: set[str] = set()

    def visit(path: str) -> None:
        if path in done:
            return
        if path in visiting:
            raise BundleError(f"{path}: imports itself round a cycle")
        visiting.add(path)
        module = parse(path)
        for _binding, target in module.imports:
            visit(target)
        visiting.discard(path)
        done[path] = module

    visit(entry)
    return list(done.values())


def bundle(entry: str) -> str:
    """The script of `entry` (a path under tunnel/relay/web/, such as `static/transcript.js`)
    with every module it imports, for one inline `<script type="module">`."""
    modules = _in_order(entry, _parse)
    names = {module.path: f"__module_{index}" for index, module in enumerate(modules)}
    parts: list[str] = []
    for module in modules:
        bindings = "\n".join(
            binding.replace("{module}", names[target]) for binding, target in module.imports
        )
        returned = ", ".join(
            name if name == local else f"{name}: {local}" for name, local in module.exports
        )
        parts.append(
            f"// {module.path}\nconst {names[module.path]} = (() => {{\n{bindings}\n"
            f"{module.body.strip()}\nreturn {{ {returned} }};\n}})();\n"
        )
    return _HTML_OPENERS.sub(r"\\x3C", "\n".join(parts))
