"""`gateway config check`: the environment checked as `gateway serve` would read it."""

from __future__ import annotations

import os
import sys

import orjson

from gateway.configuration import ConfigurationError, load_settings, summary, unknown_variables

__all__ = ["check_configuration"]


def check_configuration() -> int:
    """`gateway config check`: every problem of the environment, or the configuration."""
    problems = unknown_variables(os.environ)
    try:
        settings = load_settings()
    except ConfigurationError as exc:
        problems = exc.problems + problems
    if problems:
        for problem in problems:
            print(f"gateway: invalid configuration: {problem}", file=sys.stderr)
        return 2
    print(orjson.dumps(summary(settings), option=orjson.OPT_INDENT_2).decode())
    return 0
