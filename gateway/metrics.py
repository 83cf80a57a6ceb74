"""Prometheus metrics. Labels carry outcomes and states only, never ids or content."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "EMBEDDED",
    "EMBED_LAG",
    "EMBED_QUEUED",
    "EMBED_RETRIES",
    "JOBS_DEAD",
    "JOBS_LAG",
    "JOBS_PENDING",
    "JOBS_QUEUED",
    "JOBS_RECLAIMED",
    "JOB_WAIT_SECONDS",
    "LTM_RETRIES",
    "MEMORIES_FORGOTTEN",
    "OUTBOX_AGE",
    "OUTBOX_DEPTH",
    "RECALLS",
    "RECALL_SECONDS",
    "REQUESTS",
    "RUNS",
    "RUN_SECONDS",
    "TURNS_DROPPED",
    "TURNS_STORED",
]

REQUESTS = Counter("gateway_requests_total", "HTTP requests", ["method", "status"])
RUNS = Counter("gateway_runs_total", "Agent runs by outcome", ["outcome"])
RUN_SECONDS = Histogram("gateway_run_seconds", "Agent run duration")
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
RECALLS = Counter(
    "gateway_ltm_recalls_total",
    "Long-term memory recalls by outcome (hits, empty, skipped, failed, timeout)",
    ["outcome"],
)
RECALL_SECONDS = Histogram("gateway_ltm_recall_seconds", "Long-term memory recall duration")
TURNS_STORED = Counter("gateway_ltm_turns_stored_total", "Turns delivered to long-term memory")
TURNS_DROPPED = Counter(
    "gateway_ltm_turns_dropped_total",
    "Turns not delivered: their context was scrubbed or expired, or Cortadel refused them",
    ["reason"],
)
MEMORIES_FORGOTTEN = Counter(
    "gateway_ltm_memories_deleted_total", "Long-term memories deleted with their context"
)
LTM_RETRIES = Counter("gateway_ltm_retries_total", "Cortadel calls retried by the outbox")
OUTBOX_DEPTH = Gauge("gateway_ltm_outbox_depth", "Long-term memory jobs not yet done")
OUTBOX_AGE = Gauge("gateway_ltm_outbox_oldest_seconds", "Age of the oldest outbox job")
