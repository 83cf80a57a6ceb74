"""`gateway worker`: agents run from the durable job queue, without HTTP, next to the
`gateway serve` processes that share its Redis."""

from __future__ import annotations

import asyncio
import logging
import signal

from gateway import gc_pauses
from gateway.cli.embedded import attach
from gateway.cli.keyring_checks import keys_agree
from gateway.cli.version import log_configuration
from gateway.settings import Settings

__all__ = ["work"]

log = logging.getLogger("gateway")


async def _work(settings: Settings) -> None:
    from prometheus_client import start_http_server

    from gateway.runtime.runtime import Runtime

    runtime = Runtime.build(settings, serving=False)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if settings.metrics_port is not None:
        start_http_server(settings.metrics_port, addr=settings.host)
    await runtime.start()
    gc_pauses.settle()
    log.info("worker started", extra={"queue": settings.queue})
    await stop.wait()
    log.info("worker stopping")
    await runtime.stop()


def work(settings: Settings) -> int:
    if settings.queue != "stream":
        log.error("gateway worker needs the durable queue (GATEWAY_QUEUE=stream)")
        return 2
    settings = settings.model_copy(update={"workers": True})
    attached = attach(settings)
    if attached is None or not keys_agree(attached):
        return 2
    log_configuration("worker", attached)
    from gateway.runtime.runtime import RedisAbsentError

    try:
        asyncio.run(_work(attached))
    except RedisAbsentError:  # logged in one line
        return 1
    return 0
