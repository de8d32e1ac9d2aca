"""Package re-exports loaded on first use, so that a command imports only the code it runs.

Every command's process imports the command-line modules of all the packages (`tunnel --help`
lists them all); a package `__init__` that imported its whole API up front would make each
command pay for the others' network, crypto and storage code.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """Return a module `__getattr__` (PEP 562) for `package`: the first use of a re-exported
    name imports its home module, `homes[name]`, and keeps the value as a plain attribute.

    Meant for `if TYPE_CHECKING: <the imports> else: __getattr__ = lazy_exports(...)`, so that
    type checkers see ordinary imports and still flag a name the package does not export.
    """

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(home)
        # Every name from that home at once: importing a submodule also sets the package's
        # attribute of the same name to the module (`tunnel.link.dial`), which must not
        # shadow the function re-exported under that name.
        for other, other_home in homes.items():
            if other_home == home:
                setattr(sys.modules[package], other, getattr(module, other))
        return getattr(module, name)

    return __getattr__
