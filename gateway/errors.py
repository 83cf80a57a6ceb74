"""The gateway's one error hierarchy, mapped to A2A error codes and HTTP statuses.

::

    GatewayError                      (500, -32603 InternalError)
     ├── JSONParseError               (400, -32700)
     ├── InvalidRequestError          (400, -32600)
     ├── InvalidParamsError           (400, -32602)
     ├── MethodNotFoundError          (404, -32601)
     ├── TaskNotFoundError            (404, -32001)
     ├── ContextNotFoundError         (404, -32010)
     ├── AgentNotFoundError           (404, -32011)
     ├── ApiKeyNotFoundError          (404, -32028)
     ├── TaskNotCancelableError       (409, -32002)
     ├── TaskNotContinuableError      (409, -32012)
     ├── IdempotencyConflictError     (409, -32013)
     ├── AgentExistsError             (409, -32014)
     ├── AgentReadOnlyError           (409, -32015)
     ├── TaskBusyError                (409, -32016)
     ├── PushNotificationNotSupportedError (501, -32003)
     ├── UnsupportedOperationError    (501, -32004)
     ├── ContentTypeNotSupportedError (415, -32005)
     ├── InvalidAgentResponseError    (502, -32006)
     ├── ExtendedCardNotConfiguredError (400, -32007)
     ├── VersionNotSupportedError     (400, -32009)
     ├── UnauthenticatedError         (401, -32020)
     ├── ForbiddenError               (403, -32021)
     ├── PayloadTooLargeError         (413, -32022)
     ├── HostNotAllowedError          (421, -32024)
     ├── RequestTimeoutError          (408, -32025)
     ├── HeadersTooLargeError         (431, -32026)
     ├── RateLimitedError             (429, -32027, Retry-After, RateLimit)
     │    └── StreamsLimitedError     (a principal's open streams)
     ├── QuotaExceededError           (429, -32029)
     ├── StoredDataUnreadableError    (500, -32030: stored content does not decrypt)
     └── UnavailableError             (503, -32603 InternalError, Retry-After)
          ├── StoreUnavailableError   (Redis unreachable)
          │    └── ReplicasBehindError (a write not on enough Redis replicas in time)
          └── StreamsUnavailableError (the process's open streams)

Messages are fixed, safe sentences: never user content, never a stack trace.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AgentExistsError",
    "AgentNotFoundError",
    "AgentReadOnlyError",
    "ApiKeyNotFoundError",
    "ContentTypeNotSupportedError",
    "ContextNotFoundError",
    "ExtendedCardNotConfiguredError",
    "ForbiddenError",
    "GatewayError",
    "HeadersTooLargeError",
    "HostNotAllowedError",
    "IdempotencyConflictError",
    "InvalidAgentResponseError",
    "InvalidParamsError",
    "InvalidRequestError",
    "JSONParseError",
    "MethodNotFoundError",
    "PayloadTooLargeError",
    "PushNotificationNotSupportedError",
    "QuotaExceededError",
    "RateLimitedError",
    "ReplicasBehindError",
    "RequestTimeoutError",
    "StoreUnavailableError",
    "StoredDataUnreadableError",
    "StreamsLimitedError",
    "StreamsUnavailableError",
    "TaskBusyError",
    "TaskNotCancelableError",
    "TaskNotContinuableError",
    "TaskNotFoundError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnsupportedOperationError",
    "VersionNotSupportedError",
]


class GatewayError(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[int] = -32603
    name: ClassVar[str] = "InternalError"
    default_message: ClassVar[str] = "Internal error"

    def __init__(self, message: str | None = None, data: dict[str, Any] | None = None) -> None:
        self.message = message or self.default_message
        self.data = data
        super().__init__(self.message)

    def headers(self) -> dict[str, str]:
        return {}

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.name, "code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out


class JSONParseError(GatewayError):
    status, code, name = 400, -32700, "JSONParseError"
    default_message = "Request body is not valid JSON"


class InvalidRequestError(GatewayError):
    """A JSON-RPC envelope that is not a valid request object."""

    status, code, name = 400, -32600, "InvalidRequestError"
    default_message = "The JSON sent is not a valid JSON-RPC request"


class InvalidParamsError(GatewayError):
    status, code, name = 400, -32602, "InvalidParamsError"
    default_message = "Invalid parameters"


class MethodNotFoundError(GatewayError):
    status, code, name = 404, -32601, "MethodNotFoundError"
    default_message = "Method not found"


class TaskNotFoundError(GatewayError):
    status, code, name = 404, -32001, "TaskNotFoundError"
    default_message = "Task not found"


class ContextNotFoundError(GatewayError):
    status, code, name = 404, -32010, "ContextNotFoundError"
    default_message = "Context not found"


class AgentNotFoundError(GatewayError):
    status, code, name = 404, -32011, "AgentNotFoundError"
    default_message = "Agent not found"


class ApiKeyNotFoundError(GatewayError):
    status, code, name = 404, -32028, "ApiKeyNotFoundError"
    default_message = "API key not found"


class AgentExistsError(GatewayError):
    status, code, name = 409, -32014, "AgentExistsError"
    default_message = "An agent with this id already exists"


class AgentReadOnlyError(GatewayError):
    status, code, name = 409, -32015, "AgentReadOnlyError"
    default_message = "Built-in agents cannot be changed or deleted"


class TaskNotCancelableError(GatewayError):
    status, code, name = 409, -32002, "TaskNotCancelableError"
    default_message = "Task is in a terminal state and cannot be canceled"


class TaskNotContinuableError(GatewayError):
    status, code, name = 409, -32012, "TaskNotContinuableError"
    default_message = "Task is in a terminal state and cannot take more messages"


class TaskBusyError(GatewayError):
    status, code, name = 409, -32016, "TaskBusyError"
    default_message = (
        "A run of this task is under way and its run policy is 'reject'; retry once it settles"
    )


class IdempotencyConflictError(GatewayError):
    status, code, name = 409, -32013, "IdempotencyConflictError"
    default_message = "messageId was already used with a different message"


class PushNotificationNotSupportedError(GatewayError):
    status, code, name = 501, -32003, "PushNotificationNotSupportedError"
    default_message = "Push notifications are not supported"


class UnsupportedOperationError(GatewayError):
    status, code, name = 501, -32004, "UnsupportedOperationError"
    default_message = "This operation is not supported"


class ContentTypeNotSupportedError(GatewayError):
    status, code, name = 415, -32005, "ContentTypeNotSupportedError"
    default_message = "The agent cannot produce any of the accepted output modes"


class InvalidAgentResponseError(GatewayError):
    status, code, name = 502, -32006, "InvalidAgentResponseError"
    default_message = "The agent backend returned an invalid response"


class ExtendedCardNotConfiguredError(GatewayError):
    status, code, name = 400, -32007, "ExtendedAgentCardNotConfiguredError"
    default_message = "This agent has no authenticated extended card"


class VersionNotSupportedError(GatewayError):
    status, code, name = 400, -32009, "VersionNotSupportedError"
    default_message = "This A2A protocol version is not supported; use 0.3 or 1.0"


class UnauthenticatedError(GatewayError):
    status, code, name = 401, -32020, "UnauthenticatedError"
    default_message = "Missing or invalid credentials"

    def __init__(
        self, message: str | None = None, data: dict[str, Any] | None = None, *, reason: str = ""
    ) -> None:
        super().__init__(message, data)
        self.reason = reason  # RFC 6750 error code ("invalid_token"), or none

    def headers(self) -> dict[str, str]:
        challenge = 'Bearer realm="gateway"'
        if self.reason:
            challenge += f', error="{self.reason}"'
        return {"WWW-Authenticate": challenge}


class ForbiddenError(GatewayError):
    status, code, name = 403, -32021, "ForbiddenError"
    default_message = "Forbidden"


class PayloadTooLargeError(GatewayError):
    status, code, name = 413, -32022, "PayloadTooLargeError"
    default_message = "Request body is too large"


class HostNotAllowedError(GatewayError):
    """The request names a host this gateway does not serve (a DNS-rebinding page, or a
    cross-site page in open mode)."""

    status, code, name = 421, -32024, "HostNotAllowedError"
    default_message = "This host name or origin is not served here"


class RequestTimeoutError(GatewayError):
    status, code, name = 408, -32025, "RequestTimeoutError"
    default_message = "The request's headers or body took too long to arrive"


class HeadersTooLargeError(GatewayError):
    status, code, name = 431, -32026, "HeadersTooLargeError"
    default_message = "The request line and headers are too large"


class RateLimitedError(GatewayError):
    """A rate limit refused the request; ``limit`` names which ("user", "tenant", "auth")."""

    status, code, name = 429, -32027, "RateLimitedError"
    default_message = "Too many requests"

    def __init__(self, limit: str, retry_after: int, fields: dict[str, str] | None = None) -> None:
        super().__init__(
            f"Rate limit exceeded: {limit}; retry after {retry_after} s",
            data={"limit": limit, "retryAfterSeconds": retry_after},
        )
        self.retry_after = retry_after
        self.fields = fields or {}

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after), **self.fields}


class StreamsLimitedError(RateLimitedError):
    """A new stream over its principal's limit of open streams (its open ones go on)."""

    RETRY_AFTER = 5

    def __init__(self) -> None:
        super().__init__("streams", self.RETRY_AFTER)


class QuotaExceededError(GatewayError):
    """A quota would be exceeded; ``quota`` names it (``messages_per_context``,
    ``bytes_per_context``, ``contexts_per_user``, ``running_tasks_per_user``). Nothing of the
    request was stored."""

    status, code, name = 429, -32029, "QuotaExceededError"
    default_message = "A quota is exhausted"

    def __init__(self, quota: str, limit: int) -> None:
        super().__init__(
            f"Quota exceeded: {quota} (limit {limit}); nothing was stored",
            data={"quota": quota, "limit": limit},
        )


class StoredDataUnreadableError(GatewayError):
    """A stored value does not decrypt here: it was sealed for another user, context or
    field (moved or altered), or with a key that is not configured. Never content."""

    status = 500
    code = -32030
    name = "StoredDataUnreadableError"
    default_message = (
        "Stored data could not be decrypted: it was not written for this place, or its "
        "encryption key is not configured"
    )


class UnavailableError(GatewayError):
    """A dependency (Redis, the embedder) cannot be reached now."""

    status = 503
    default_message = "A dependency is unavailable; retry later"

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class StoreUnavailableError(UnavailableError):
    default_message = "The store is unavailable; retry later"


class StreamsUnavailableError(UnavailableError):
    """A new stream over the process's limit of open streams (its open ones go on)."""

    default_message = "This server has as many open streams as it takes; retry later"

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(StreamsLimitedError.RETRY_AFTER)}


class ReplicasBehindError(StoreUnavailableError):
    """GATEWAY_REDIS_MIN_REPLICAS_ACK: the write reached the primary, but not enough of its
    replicas acknowledged it in time, so it is not reported done (a retry with the same
    message id does not repeat it)."""

    default_message = "The store could not replicate the write in time; retry later"
