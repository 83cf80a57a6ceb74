"""The @a2a-js/sdk environment the tests drive the official JS client from: npm installs
it (with its gRPC peers) under ``.venv/clients/a2a-js`` on first use, reused after (a
marker names what was installed). Tests that need it skip when Node.js is not installed."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path

from tests.clients.install_lock import installing
from tests.processes import ROOT

PACKAGES = ("@a2a-js/sdk@1.3.0", "@grpc/grpc-js@1.14.7", "@bufbuild/protobuf@2.17.0")
ENV = ROOT / ".venv" / "clients" / "a2a-js"


def available() -> bool:
    return shutil.which("node") is not None and shutil.which("npm") is not None


@cache
def prefix() -> Path:
    """The directory whose ``node_modules`` holds the SDK (installed on first use)."""
    marker = ENV / ".installed"
    wanted = " ".join(PACKAGES)
    with installing(ENV):
        if not (marker.is_file() and marker.read_text() == wanted):
            ENV.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                ["npm", "install", "--prefix", str(ENV), "--no-audit", "--no-fund", "--silent",
                 *PACKAGES],
                check=True,
                timeout=600,
            )  # fmt: skip
            marker.write_text(wanted)
    return ENV
