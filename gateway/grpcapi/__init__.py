"""The A2A 1.0 gRPC binding (``A2AService`` of the normative ``a2a.proto``), served beside
the HTTP bindings from the same services (``server.py``, ``service.py``, ``edge.py``).

``proto/a2a.proto`` is A2A v1.0.1's normative proto, unchanged. Its stubs are generated
and shipped (``proto/a2a_pb2.py``, ``.pyi``): an installed wheel needs no protoc, and
``tests/test_grpc_stubs.py`` regenerates them with grpcio-tools and fails when they differ
(``make protos`` rewrites them). The proto is compiled from the repository's root, so its
modules are named under this package, apart from a2a-sdk 0.3's own ``a2a.grpc`` modules."""
