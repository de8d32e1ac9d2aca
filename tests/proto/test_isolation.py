"""tunnel.proto stays sans-I/O: importing it loads no network or concurrency library."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

FORBIDDEN = {"anyio", "websockets", "asyncio", "trio", "socket", "ssl", "selectors", "threading"}


@pytest.mark.timeout(60)
def test_importing_tunnel_proto_loads_no_io_library() -> None:
    code = (
        "import json, sys\n"
        "import tunnel.proto\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(json.loads(result.stdout))
    assert "tunnel" in loaded
    assert loaded & FORBIDDEN == set()
