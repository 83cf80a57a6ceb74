"""Prometheus metrics. Labels carry outcomes and states only, never ids or content."""

from __future__ import annotations

import functools
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

__all__ = [
    "EMBEDDED",
    "EMBED_LAG",
    "EMBED_QUEUED",
    "EMBED_RETRIES",
    "GC_PAUSE_SECONDS",
    "JOBS_DEAD",
    "JOBS_LAG",
    "JOBS_PENDING",
    "JOBS_QUEUED",
    "JOBS_RECLAIMED",
    "JOB_WAIT_SECONDS",
    "LTM_RETRIES",
    "MEMORIES_FORGOTTEN",
    "OPERATIONS",
    "OPERATION_SECONDS",
    "OUTBOX_AGE",
    "OUTBOX_DEPTH",
    "PUSH_DELIVERIES",
    "RATE_LIMITED",
    "RECALLS",
    "RECALL_SECONDS",
    "REQUESTS",
    "REQUEST_SECONDS",
    "RUNS",
    "RUN_SECONDS",
    "TASK_TRANSITIONS",
    "TURNS_DROPPED",
    "TURNS_STORED",
    "series",
]


@functools.cache
def series(metric: Any, *labels: str) -> Any:
    """``metric.labels(*labels)``, kept: ``labels()`` takes a lock and checks its values on
    every call. For label values from small fixed sets only (the cache never shrinks)."""
    return metric.labels(*labels)


# No ``*_created`` series: they would double the exposition, and nothing charts them.
disable_created_metrics()  # type: ignore[no-untyped-call]

# HTTP: ``binding`` is the protocol a route speaks ("rest": the A2A HTTP+JSON binding and the
# gateway's own endpoints; "mcp"), ``route`` the route's template (``/v1/tasks/{task_id}``,
# never the path, which holds ids; "unmatched" when no route matches), ``method`` one of the
# standard methods or "OTHER".
REQUESTS = Counter(
    "gateway_requests_total",
    "HTTP requests answered, by binding, method, route template and status",
    ["binding", "method", "route", "status"],
)
REQUEST_SECONDS = Histogram(
    "gateway_request_seconds",
    "HTTP request duration (a blocking send includes its run), by binding, method and route",
    ["binding", "method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
# Runs: ``agent`` is the agent's type (echo, openai, a2a-remote, plugin; "unknown" when the run
# ended before its agent was found), never its id: registered ids are per tenant, unbounded.
# Operations (http/operations.py): a REST route, or each JSON-RPC method of a request, with
# its A2A outcome ("ok" or the error's name; JSON-RPC answers errors with HTTP 200).
OPERATIONS = Counter(
    "gateway_operations_total",
    "A2A operations answered, by binding, operation and outcome (ok or the A2A error name)",
    ["binding", "operation", "outcome"],
)
OPERATION_SECONDS = Histogram(
    "gateway_operation_seconds",
    "Duration of the request that carried the operation, by binding and operation",
    ["binding", "operation"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
RUNS = Counter(
    "gateway_runs_total",
    "Agent runs ended in this process, by agent type and outcome",
    ["agent", "outcome"],
)
RUN_SECONDS = Histogram(
    "gateway_run_seconds",
    "Agent run duration, from taking the job to its last write, by agent type",
    ["agent"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
TASK_TRANSITIONS = Counter(
    "gateway_task_transitions_total",
    "Task state changes written by this process (sends, runs, cancels), by the state entered",
    ["state"],
)
JOBS_QUEUED = Gauge("gateway_jobs_queued", "Jobs waiting for a worker")
JOBS_PENDING = Gauge("gateway_jobs_pending", "Jobs taken by a worker, not yet finished")
JOBS_LAG = Gauge("gateway_jobs_lag_seconds", "Age of the oldest job waiting for a worker")
JOBS_DEAD = Gauge("gateway_jobs_dead", "Jobs moved to the dead-letter stream")
JOBS_RECLAIMED = Counter("gateway_jobs_reclaimed_total", "Stalled jobs put back in the queue")
JOB_WAIT_SECONDS = Histogram(
    "gateway_job_wait_seconds",
    "Time from a job's enqueue to the start of its run",
    buckets=(
        0.001,
        0.002,
        0.003,
        0.005,
        0.0075,
        0.01,
        0.015,
        0.02,
        0.03,
        0.05,
        0.1,
        0.25,
        0.5,
        1.0,
        2.5,
        5.0,
        10.0,
        30.0,
    ),
)
EMBEDDED = Counter("gateway_messages_embedded_total", "User messages embedded and stored")
EMBED_RETRIES = Counter("gateway_embedder_retries_total", "Embedding calls retried")
EMBED_QUEUED = Gauge("gateway_embed_queued", "User messages waiting to be embedded")
EMBED_LAG = Gauge("gateway_embed_lag_seconds", "Age of the oldest message waiting to be embedded")
RATE_LIMITED = Counter(
    "gateway_rate_limited_total",
    "Requests refused by a rate limit (429), by limit: user, tenant or auth (failed "
    "authentications of a client address)",
    ["limit"],
)
RECALLS = Counter(
    "gateway_ltm_recalls_total",
    "Long-term memory recalls by outcome (hits, empty, skipped, failed, timeout)",
    ["outcome"],
)
RECALL_SECONDS = Histogram("gateway_ltm_recall_seconds", "Long-term memory recall duration")
TURNS_STORED = Counter("gateway_ltm_turns_stored_total", "Turns delivered to long-term memory")
TURNS_DROPPED = Counter(
    "gateway_ltm_turns_dropped_total",
    "Turns not delivered: their context was scrubbed or expired, or they held nothing to store",
    ["reason"],
)
MEMORIES_FORGOTTEN = Counter(
    "gateway_ltm_memories_deleted_total", "Long-term memories deleted with their context"
)
LTM_RETRIES = Counter("gateway_ltm_retries_total", "Cortadel calls retried by the outbox")
OUTBOX_DEPTH = Gauge("gateway_ltm_outbox_depth", "Long-term memory jobs not yet done")
OUTBOX_AGE = Gauge("gateway_ltm_outbox_oldest_seconds", "Age of the oldest outbox job")
# Webhook deliveries (push notifications), by outcome: delivered, retried (an attempt that
# failed and will be repeated), dead (given up: dead-lettered), dropped (its config, task or
# context is gone).
PUSH_DELIVERIES = Counter(
    "gateway_push_deliveries_total", "Webhook delivery attempts by outcome", ["outcome"]
)
# The garbage collector: how long each collection stopped the process, by generation (0-2).
GC_PAUSE_SECONDS = Histogram(
    "gateway_gc_pause_seconds",
    "Garbage collector pauses, by generation",
    ["generation"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25),
)
