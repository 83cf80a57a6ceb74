"""Generates the gRPC binding's stubs (``gateway/grpcapi/proto/a2a_pb2.py`` and ``.pyi``)
from its proto with grpcio-tools: ``python -m tests.grpc_stubs OUT_DIR`` (``make protos``
writes them in place). The proto is compiled from the repository's root, so its modules
are named under the gateway's package."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO = "gateway/grpcapi/proto/a2a.proto"
STUBS = ("a2a_pb2.py", "a2a_pb2.pyi")


def generate(out: Path) -> None:
    """Writes the stubs under ``out`` (``out/gateway/grpcapi/proto/...``), then moves them
    to ``out`` itself."""
    site = Path(sysconfig.get_paths()["purelib"])
    include = Path(protoc.__file__).parent / "_proto"
    build = out / ".build"
    build.mkdir(parents=True, exist_ok=True)
    code = protoc.main(
        [
            "protoc",
            f"-I{ROOT}",
            f"-I{site}",  # google/api/*.proto of googleapis-common-protos
            f"-I{include}",
            f"--python_out={build}",
            f"--pyi_out={build}",
            str(ROOT / PROTO),
        ]
    )
    if code != 0:
        raise SystemExit(f"protoc failed ({code})")
    for name in STUBS:
        (build / PROTO).with_name(name).replace(out / name)


if __name__ == "__main__":
    generate(Path(sys.argv[1]))
