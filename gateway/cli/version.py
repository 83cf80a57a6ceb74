"""What a starting command says of itself: the gateway's version and its effective
configuration (one log line, no secret)."""

from __future__ import annotations

import importlib.metadata
import logging

import gateway
from gateway.configuration import summary
from gateway.settings import Settings

__all__ = ["log_configuration", "version"]

log = logging.getLogger("gateway")


def version() -> str:
    try:
        return importlib.metadata.version("gateway")
    except importlib.metadata.PackageNotFoundError:
        return gateway.__version__


def log_configuration(command: str, settings: Settings) -> None:
    log.info(
        "effective configuration",
        extra={"command": command, "version": version(), "config": summary(settings)},
    )
