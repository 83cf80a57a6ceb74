"""The shipped gRPC stubs are the ones the proto makes: regenerated with grpcio-tools and
compared byte for byte (``make protos`` rewrites them)."""

from __future__ import annotations

from pathlib import Path

from tests.grpc_stubs import ROOT, STUBS, generate


def test_the_shipped_stubs_are_generated_from_the_shipped_proto(tmp_path: Path) -> None:
    generate(tmp_path)
    shipped = ROOT / "gateway" / "grpcapi" / "proto"
    for name in STUBS:
        assert (tmp_path / name).read_bytes() == (shipped / name).read_bytes(), (
            f"{name} is stale: run `make protos`"
        )


def test_the_proto_is_the_normative_a2a_1_0_service() -> None:
    text = (ROOT / "gateway" / "grpcapi" / "proto" / "a2a.proto").read_text()
    assert "package lf.a2a.v1;" in text and "service A2AService {" in text
