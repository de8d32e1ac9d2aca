"""docs/architecture.md kept true: the modules it lists exist and every module is listed, the
paths, classes and methods it names exist, the code imports only in the directions it allows,
and no module imports itself round a cycle."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tunnel"
STATIC = PACKAGE / "relay" / "web" / "static"
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    """The text of the doc's `## title` section, up to the next `## ` heading."""
    start = DOC.index(f"\n## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end >= 0 else len(DOC)]


# -- the code's modules and their imports -------------------------------------------------------


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@dataclass(frozen=True, slots=True)
class Imports:
    top: frozenset[str]
    """Modules of ours imported when the module is: at module level, outside `if TYPE_CHECKING:`."""
    local: frozenset[str]
    """Modules of ours imported inside a function body, when it runs."""
    typing: frozenset[str]
    """Modules of ours imported only for the type checker."""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _known(name: str, modules: Iterable[str]) -> str | None:
    """The longest prefix of `name` that is one of `modules` (`a.b.C` names the module `a.b`)."""
    known = set(modules)
    parts = name.split(".")
    while parts and ".".join(parts) not in known:
        parts.pop()
    return ".".join(parts) if parts else None


def imports_of(source: str, name: str, modules: Iterable[str], *, package: bool = False) -> Imports:
    """What module `name` (a package's `__init__` when `package`) imports of `modules`."""
    modules = set(modules)
    found: dict[str, set[str]] = {"top": set(), "local": set(), "typing": set()}

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        base = node.module or ""
        if node.level:
            here = name.split(".") if package else name.split(".")[:-1]
            here = here[: len(here) - (node.level - 1)]
            base = ".".join(here + ([node.module] if node.module else []))
        return [f"{base}.{alias.name}" for alias in node.names]

    def visit(nodes: Iterable[ast.AST], kind: str) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                visit(node.body, "typing")
                visit(node.orelse, kind)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in targets(node):
                    module = _known(target, modules)
                    if module is not None and module != name:
                        found[kind].add(module)
                continue
            inner = kind
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner = "typing" if kind == "typing" else "local"
            visit(ast.iter_child_nodes(node), inner)

    visit(ast.parse(source).body, "top")
    return Imports(
        top=frozenset(found["top"]),
        local=frozenset(found["local"] - found["top"]),
        typing=frozenset(found["typing"] - found["top"] - found["local"]),
    )


IMPORTS: dict[str, Imports] = {
    name: imports_of(
        path.read_text(encoding="utf-8"), name, MODULES, package=path.name == "__init__.py"
    )
    for name, path in MODULES.items()
}


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


# -- what the doc says ---------------------------------------------------------------------------


def listed_modules() -> set[str]:
    """The files the doc's "Modules" section lists, as paths under tunnel/."""
    prefix = None
    listed: set[str] = set()
    for line in _section("Modules").splitlines():
        if line.startswith("Top level"):
            prefix = ""
        elif match := re.match(r"`(\w+)/`:", line):
            prefix = f"{match[1]}/"
        elif line.startswith("The page, `tunnel/relay/web/static/`"):
            prefix = "relay/web/static/"
        elif (match := re.match(r"- `([\w/.]+\.(?:py|js))`", line)) and prefix is not None:
            listed.add(prefix + match[1])
    return listed


def allowed_directions() -> dict[str, set[str]]:
    """The doc's table of who may import whom: a part of the package -> the parts it may import."""
    allowed: dict[str, set[str]] = {}
    for line in _section("Who imports whom").splitlines():
        match = re.match(r"\|\s*`([\w/.]+)`\s*\|(.*)\|\s*$", line)
        if match:
            allowed[match[1]] = set(re.findall(r"`([\w/.]+)`", match[2]))
    return allowed


ALLOWED = allowed_directions()


def part_of(module: str) -> str:
    """The part of the package the doc's table names for `module`: a module the table names on
    its own (`e2e/channel.py`), a top-level module (`errors.py`), or its package (`e2e`)."""
    path = MODULES[module].relative_to(PACKAGE).as_posix()
    if path in ALLOWED:
        return path
    head = path.split("/")[0]
    return head if "/" in path else path


# -- the tests -----------------------------------------------------------------------------------


def test_every_module_the_doc_lists_exists() -> None:
    missing = sorted(path for path in listed_modules() if not (PACKAGE / path).is_file())
    assert missing == []


def test_every_module_of_the_package_is_listed_in_the_doc() -> None:
    listed = listed_modules()
    files = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")]
    files += [p.relative_to(PACKAGE).as_posix() for p in STATIC.glob("*.js")]
    # A package's __init__.py is the sentence after the package's name, not an item of its own.
    unlisted = sorted(
        path
        for path in files
        if path not in listed and not (path.endswith("/__init__.py") and path.count("/") == 1)
    )
    assert unlisted == []


def test_every_path_the_doc_names_exists() -> None:
    named = set(re.findall(r"`((?:[\w.]+/)+[\w.]*)`", DOC)) | set(
        re.findall(r"\(`((?:[\w.]+/)+[\w.]+)`", DOC)
    )
    missing = []
    for path in sorted(named):
        if path.startswith(("/", "./")) or not re.search(r"(/|\.\w+)$", path):
            continue  # a URL path (/v1/attach), an import specifier, an ACP method (session/update)
        bases = [ROOT, PACKAGE, PACKAGE / "relay", PACKAGE / "relay" / "web"]
        if not any((base / path).exists() for base in bases):
            missing.append(path)
    assert missing == []


def _python_classes() -> dict[str, set[str]]:
    """Each class of the package -> the names defined in its body and its bases' (by name)."""
    bodies: dict[str, set[str]] = {}
    bases: dict[str, list[str]] = {}
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            names = bodies.setdefault(node.name, set())
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    names |= {t.id for t in item.targets if isinstance(t, ast.Name)}
            bases.setdefault(node.name, []).extend(
                base.id for base in node.bases if isinstance(base, ast.Name)
            )

    def all_names(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        names = set(bodies.get(name, ()))
        for base in bases.get(name, ()):
            if base not in seen:
                names |= all_names(base, seen | {name})
        return names

    return {name: all_names(name) for name in bodies}


def test_every_method_the_doc_names_exists() -> None:
    classes = _python_classes()
    page = "\n".join(p.read_text(encoding="utf-8") for p in STATIC.glob("*.js"))
    missing = []
    for owner, name in sorted(set(re.findall(r"`([A-Z]\w*)\.(\w+)(?:\(\))?`", DOC))):
        if owner in classes:
            if name not in classes[owner]:
                missing.append(f"{owner}.{name}")
        elif not re.search(rf"class {owner}\b[\s\S]*?\b{name}\s*\(", page):
            missing.append(f"{owner}.{name} (the page)")
    assert missing == []


def test_the_doc_allows_directions_without_a_cycle() -> None:
    parts = {part_of(module) for module in MODULES}
    assert sorted(set(ALLOWED) ^ parts) == [], "the table names every part, and only those"
    for part, others in ALLOWED.items():
        assert others <= parts, part
    assert cycles(ALLOWED) == []


def test_imports_go_only_in_the_directions_the_doc_allows() -> None:
    wrong = []
    for module, found in sorted(IMPORTS.items()):
        here = part_of(module)
        for target in sorted(found.top | found.local | found.typing):
            there = part_of(target)
            if there != here and there not in ALLOWED.get(here, set()):
                wrong.append(f"{module} -> {target} ({here} may not import {there})")
    assert wrong == []


def test_no_module_imports_itself_round_a_cycle() -> None:
    at_import = {module: found.top for module, found in IMPORTS.items()}
    assert cycles(at_import) == []
    when_run = {module: found.top | found.local for module, found in IMPORTS.items()}
    assert cycles(when_run) == [], "function-local imports close a cycle"


# -- the checker itself finds what it looks for --------------------------------------------------


def test_the_checker_sees_top_level_local_and_type_only_imports() -> None:
    source = """
from typing import TYPE_CHECKING
from pkg.a import thing
from . import b
if TYPE_CHECKING:
    from pkg.c import Kind
else:
    import pkg.d
def later() -> None:
    from pkg.e import helper
"""
    modules = ["pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d", "pkg.e", "pkg.here"]
    found = imports_of(source, "pkg.here", modules)
    assert found.top == {"pkg.a", "pkg.b", "pkg.d"}
    assert found.local == {"pkg.e"}
    assert found.typing == {"pkg.c"}


def test_the_checker_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_every_error_class_is_placed_in_the_doc() -> None:
    errors = _section("Errors")
    roots = {"Exception", "ValueError", "OSError"}
    found: dict[str, str] = {}
    for _ in range(4):  # subclasses of subclasses, defined in any order
        for module, path in MODULES.items():
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                    if bases & (roots | set(found)):
                        found[node.name] = module
    unplaced = sorted(f"{name} ({module})" for name, module in found.items() if name not in errors)
    assert unplaced == []
