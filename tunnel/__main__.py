"""`python -m tunnel`: the same command line as the `tunnel` script."""

from __future__ import annotations

from tunnel.cli import main

main()
