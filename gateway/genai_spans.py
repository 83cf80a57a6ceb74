"""Model calls as OpenTelemetry GenAI client spans: ``chat <model>`` with the
``gen_ai.*`` attributes of the semantic conventions (operation, provider, request and
response model, options, finish reasons, token usage), never a prompt or an answer."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from gateway import tracing

__all__ = ["answered", "chat_span"]

_OPTIONS = {
    "temperature": "gen_ai.request.temperature",
    "max_tokens": "gen_ai.request.max_tokens",
}


@contextlib.contextmanager
def chat_span(provider: str, options: dict[str, Any]) -> Iterator[trace.Span]:
    """The span of one chat completion call with ``options`` (the request's keywords)."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,
        "gen_ai.request.model": options["model"],
    }
    attributes.update({name: options[k] for k, name in _OPTIONS.items() if k in options})
    with tracing.span(f"chat {options['model']}", attributes, kind=SpanKind.CLIENT) as span:
        try:
            yield span
        except GeneratorExit:  # the caller stopped reading the answer: not the model's failure
            raise
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            tracing.failed(exc, span)
            raise


def answered(span: trace.Span, completion: Any) -> None:
    """What the model answered, as counts and names: model, id, finish reasons, tokens."""
    if not span.is_recording():
        return
    attributes: dict[str, Any] = {}
    if getattr(completion, "model", None):
        attributes["gen_ai.response.model"] = completion.model
    if getattr(completion, "id", None):
        attributes["gen_ai.response.id"] = completion.id
    reasons = [c.finish_reason for c in getattr(completion, "choices", ()) if c.finish_reason]
    if reasons:
        attributes["gen_ai.response.finish_reasons"] = reasons
    usage = getattr(completion, "usage", None)
    if usage is not None:
        attributes["gen_ai.usage.input_tokens"] = usage.prompt_tokens or 0
        attributes["gen_ai.usage.output_tokens"] = usage.completion_tokens or 0
    span.set_attributes(attributes)
