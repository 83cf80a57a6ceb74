"""Bindings (`BENCH_ONLY=bindings`): one blocking echo send in every binding's spelling —
REST, JSON-RPC and proto-JSON REST of A2A 0.3, REST and JSON-RPC of 1.0, and gRPC — against
the canonical REST, on one gateway, in interleaved rounds; then a streaming send's first
event over gRPC beside SSE's.

The cost of a binding is the gateway's CPU per request (read from /proc, so it does not
depend on what else the host runs, as throughput on a shared host does). The HTTP bindings
are driven by ``loadgen``'s raw connections; gRPC by grpcio's asyncio client, one channel
per concurrent caller, as ``loadgen`` opens one connection per caller.

The transport floor (figures, not targets) is the server CPU per call of an empty grpcio
asyncio handler and of an empty uvicorn/Starlette endpoint in one process
(``bench.empty_endpoints``), loaded the same way: the part of gRPC's cost that no gateway
code can take away.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import orjson
from google.protobuf import struct_pb2

from bench import loadgen
from bench.empty_endpoints import METHOD, SERVICE
from bench.harness import (
    ROUNDS,
    SECONDS,
    TEXT,
    by_round,
    cpu_seconds,
    in_turn,
    line,
    merge,
    one_gateway,
    process,
    ratio,
    send_body,
)
from bench.report import REPORT
from gateway.embedded_redis import free_port
from gateway.grpcapi.proto import a2a_pb2 as pb

_SERVICE = f"/{pb.DESCRIPTOR.services_by_name['A2AService'].full_name}/"
GRPC = "gRPC 1.0"
# A binding's run: (concurrency, seconds, counter) -> its result.
Runner = Callable[[int, float, "itertools.count[int]"], Awaitable[loadgen.Result]]


def _parts_v1(n: int) -> list[dict[str, object]]:
    return [{"text": TEXT}, {"data": {"hr": 72, "n": n}}]


def binding_requests() -> dict[str, Callable[[int], bytes]]:
    """One blocking echo send per HTTP binding, the same message in each one's spelling."""

    def rest(n: int) -> bytes:
        return loadgen.post("/v1/message:send", send_body(n))

    def rpc03(n: int) -> bytes:
        params = orjson.loads(send_body(n))
        body = {"jsonrpc": "2.0", "id": n, "method": "message/send", "params": params}
        return loadgen.post("/", orjson.dumps(body))

    def rest10(n: int) -> bytes:
        message = {"role": "ROLE_USER", "messageId": f"bench-{n}", "parts": _parts_v1(n)}
        return loadgen.post("/a2a/message:send", orjson.dumps({"message": message}))

    def rpc10(n: int) -> bytes:
        message = {"role": "ROLE_USER", "messageId": f"bench-{n}", "parts": _parts_v1(n)}
        body = {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": message}}
        return loadgen.post("/", orjson.dumps(body))

    def proto03(n: int) -> bytes:
        message = {
            "role": "ROLE_USER",
            "messageId": f"bench-{n}",
            "content": [{"text": TEXT}, {"data": {"data": {"hr": 72, "n": n}}}],
        }
        body = {"request": message, "configuration": {"blocking": True}}
        return loadgen.post("/a2a/v1/message:send", orjson.dumps(body))

    return {
        "REST 0.3 (canonical)": rest,
        "JSON-RPC 0.3": rpc03,
        "REST 0.3 proto-JSON": proto03,
        "REST 1.0": rest10,
        "JSON-RPC 1.0": rpc10,
    }


def _grpc_send(n: int) -> bytes:
    """The n-th send as gRPC's ``SendMessageRequest``, serialized: like ``loadgen``, the gRPC
    client builds its requests cheaply and leaves the answers unparsed (it shares the cores
    with the gateway it measures)."""
    data = struct_pb2.Value()
    data.struct_value.update({"hr": 72, "n": n})
    parts = [pb.Part(text=TEXT), pb.Part(data=data)]
    message = pb.Message(role=pb.ROLE_USER, message_id=f"bench-{n}", parts=parts)
    return pb.SendMessageRequest(message=message).SerializeToString()


async def grpc_run(
    address: str,
    concurrency: int,
    seconds: float,
    counter: itertools.count[int],
    streaming: bool = False,
    call: tuple[str, Callable[[int], bytes]] = (_SERVICE + "SendMessage", _grpc_send),
) -> loadgen.Result:
    """``concurrency`` callers, each on its own channel, calling one after another for
    ``seconds``: unary calls (``call``: the method's path and its n-th request; a send by
    default) timed to the reply, or streaming sends timed to the first event (each stream
    read to its end)."""
    result = loadgen.Result()
    deadline = time.perf_counter() + seconds
    path, request_of = call

    async def caller() -> None:
        async with grpc.aio.insecure_channel(address) as channel:
            await channel.channel_ready()
            # no (de)serializers: the requests go as built, the answers stay bytes
            unary: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(path)
            stream: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(
                _SERVICE + "SendStreamingMessage"
            )
            while time.perf_counter() < deadline:
                request = request_of(next(counter))
                started = time.perf_counter()
                try:
                    if streaming:
                        first = None
                        async for _ in stream(request, timeout=60):
                            first = first or time.perf_counter() - started
                        elapsed = first
                    else:
                        await unary(request, timeout=60)
                        elapsed = time.perf_counter() - started
                except grpc.aio.AioRpcError:
                    elapsed = None
                if elapsed is None:
                    result.errors += 1
                else:
                    result.latencies.append(elapsed)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    result.seconds = time.perf_counter() - started
    return result


def _runners(port: int, address: str) -> dict[str, Runner]:
    def http(request: Callable[[int], bytes]) -> Runner:
        return lambda c, s, counter: loadgen.run(port, request, c, s, counter)

    runners = {name: http(request) for name, request in binding_requests().items()}
    runners[GRPC] = lambda c, s, counter: grpc_run(address, c, s, counter)
    return runners


async def _costs(
    runners: dict[str, Runner], pid: int, concurrency: int, counter: itertools.count[int]
) -> tuple[dict[str, loadgen.Result], dict[str, float]]:
    """Each runner's merged result, and the CPU µs process ``pid`` spent per request of it,
    in interleaved rounds (each round runs every one once, in turn)."""
    res: dict[str, list[loadgen.Result]] = {name: [] for name in runners}
    cpu = dict.fromkeys(runners, 0.0)
    for n in range(ROUNDS):
        for name, run in in_turn(runners.items(), n):
            started = cpu_seconds(pid)
            res[name].append(await run(concurrency, SECONDS, counter))
            cpu[name] += cpu_seconds(pid) - started
    merged = {name: merge(r) for name, r in res.items()}
    return merged, {name: ratio(cpu[name] * 1e6, len(r.latencies)) for name, r in merged.items()}


async def _bindings(port: int, pid: int, address: str) -> None:
    counter = itertools.count(50_000_000)
    runners = _runners(port, address)
    canonical = next(iter(runners))
    for concurrency in (1, 32):
        merged, us = await _costs(runners, pid, concurrency, counter)
        print(f"blocking echo send per binding, concurrency {concurrency} ({ROUNDS} rounds)")
        for name, r in merged.items():
            print(f"{line(name, r)}   gateway CPU {us[name]:6.0f} µs/req")
            REPORT.run(f"bindings, c={concurrency}", name, "gateway", r)
            REPORT.figure(f"bindings c={concurrency} {name}: gateway CPU µs/request", us[name])
        for name, r in merged.items():
            if name == canonical:
                continue
            share = ratio(r.throughput, merged[canonical].throughput)
            cost = ratio(us[name], us[canonical])
            spread = by_round(r, merged[canonical])
            print(f"  {name} / canonical REST: throughput {share:.2f} ({spread}), CPU {cost:.2f}")
            # gRPC: not below canonical REST's throughput; the others within 10% of it
            floor = 1.0 if name == GRPC else 0.90
            REPORT.target(f"c={concurrency} {name} / canonical REST", share, floor, ">=")
            REPORT.target(f"c={concurrency} {name} / canonical REST CPU", cost, 1.10, "<=")
    await _first_events(port, address, counter)


async def _first_events(port: int, address: str, counter: itertools.count[int]) -> None:
    """A streaming send's first event at c=1: gRPC beside SSE, interleaved rounds."""
    from bench.streaming import _stream, _time_to_first_event

    def sse(c: int, s: float, count: itertools.count[int]) -> Awaitable[loadgen.Result]:
        return loadgen.run(port, _stream, c, s, count, exchange=_time_to_first_event)

    def over_grpc(c: int, s: float, count: itertools.count[int]) -> Awaitable[loadgen.Result]:
        return grpc_run(address, c, s, count, streaming=True)

    runs: dict[str, Runner] = {"SSE (REST 0.3)": sse, GRPC: over_grpc}
    res: dict[str, list[loadgen.Result]] = {name: [] for name in runs}
    for n in range(ROUNDS):
        for name, run in in_turn(runs.items(), n):
            res[name].append(await run(1, SECONDS, counter))
    merged = {name: merge(r) for name, r in res.items()}
    for name, r in merged.items():
        print(f"streaming send, first event, c=1, {name}: p50 {r.pct(0.5):.2f} ms, "
              f"p99 {r.pct(0.99):.2f} ms")  # fmt: skip
        REPORT.run("streaming first event, c=1", name, "gateway", r)
    share = ratio(merged[GRPC].pct(0.5), merged["SSE (REST 0.3)"].pct(0.5))
    REPORT.target("c=1 first event p50, gRPC / SSE", share, 1.10, "<=")


async def _floor(port: int, pid: int, address: str) -> None:
    body = send_body(0)
    empty_call = (f"/{SERVICE}/{METHOD}", lambda n: body)
    runners: dict[str, Runner] = {
        "empty Starlette POST": lambda c, s, count: loadgen.run(
            port, lambda n: loadgen.post("/", body), c, s, count
        ),
        "empty grpcio aio unary": lambda c, s, count: grpc_run(
            address, c, s, count, call=empty_call
        ),
    }
    for concurrency in (1, 32):
        merged, us = await _costs(runners, pid, concurrency, itertools.count())
        for name, r in merged.items():
            print(f"{line(name, r)}   server CPU {us[name]:6.0f} µs/call")
            REPORT.figure(f"transport floor c={concurrency} {name}: server CPU µs/call", us[name])
        extra = us["empty grpcio aio unary"] - us["empty Starlette POST"]
        print(f"  transport floor, c={concurrency}: gRPC costs {extra:.0f} µs/call more")
        REPORT.figure(f"transport floor c={concurrency}: gRPC's extra server CPU µs/call", extra)


def bindings_bench(tmp: Path) -> None:
    """Every binding against the canonical REST, one gateway (gRPC on its own port); then
    the transport floor: an empty gRPC handler against an empty HTTP endpoint, one process
    (``bench.empty_endpoints``), as figures: what gRPC costs the server before any gateway
    code runs."""
    grpc_port = free_port()
    env = {"GATEWAY_EMBEDDER": "none", "GATEWAY_GRPC_PORT": str(grpc_port)}
    with one_gateway(tmp, "redis-bindings", env) as served:
        asyncio.run(_bindings(served.port, served.pid, f"127.0.0.1:{grpc_port}"))
    http_port, grpc_port = free_port(), free_port()
    args = [sys.executable, "-m", "bench.empty_endpoints", str(http_port), str(grpc_port)]
    with process(args, {}, http_port) as proc:
        print("transport floor: empty endpoints, one process (no gateway)")
        asyncio.run(_floor(http_port, proc.pid, f"127.0.0.1:{grpc_port}"))
