"""The a2a-sdk 1.x environment the tests drive official 1.x clients and servers from.

a2a-sdk 1.x cannot share an environment with the gateway's 0.3: it gets its own under
``.venv/clients/a2a-1x``, made with uv from the package index on first use and reused
after (a marker names what was installed)."""

from __future__ import annotations

import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import httpx

from gateway.embedded_redis import free_port
from tests.clients.install_lock import installing
from tests.processes import PROCESS_SECONDS, ROOT, stop
from tests.waiting import until_sync

# The server extra and uvicorn serve the 1.0 remote agent double; uvicorn as locked here.
# The grpc extra: the client's gRPC transport; the signing extra: its card verifier.
PACKAGES = ("a2a-sdk[http-server,grpc,signing]==1.3.0", "uvicorn==0.55.0")
ENV = ROOT / ".venv" / "clients" / "a2a-1x"
HERE = Path(__file__).parent


@cache
def python() -> Path:
    """The Python of the a2a-sdk 1.x environment (made on first use)."""
    interpreter = ENV / "bin" / "python"
    marker = ENV / ".installed"
    wanted = " ".join(PACKAGES)
    with installing(ENV):
        if not (marker.is_file() and marker.read_text() == wanted and interpreter.is_file()):
            uv = Path(sys.executable).parent / "uv"
            subprocess.run([uv, "venv", "-q", "--allow-existing", str(ENV)], check=True)
            subprocess.run(
                [uv, "pip", "install", "-q", "--python", str(interpreter), *PACKAGES],
                check=True,
                timeout=600,
            )
            marker.write_text(wanted)
    return interpreter


class Remote1x:
    """A remote A2A 1.0 agent (``a2a_1x_remote.py``) served on one binding only; with
    ``streaming`` its card offers streaming."""

    def __init__(self, binding: str, streaming: bool = False) -> None:
        self.binding, self.streaming = binding, streaming
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Remote1x:
        script = HERE / "a2a_1x_remote.py"
        self.proc = subprocess.Popen(
            [python(), script, str(self.port), self.binding, *["streaming"] * self.streaming],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        until_sync(self._ready, timeout=PROCESS_SECONDS, what="the 1.0 remote agent to serve")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, "the 1.0 remote exited"
        try:
            return httpx.get(f"{self.base}/_seen", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def card_url(self) -> str:
        return f"{self.base}/.well-known/agent-card.json"

    def _report(self) -> dict[str, Any]:
        report: dict[str, Any] = httpx.get(f"{self.base}/_seen", timeout=5).json()
        return report

    @property
    def seen(self) -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = self._report()["seen"]
        return seen

    @property
    def canceled(self) -> list[str]:
        canceled: list[str] = self._report()["canceled"]
        return canceled
