"""Chat prompts from what a run is given (pure): system prompt, earlier turns within a
token budget, referenced tasks, the user's parts, and recalled memories.

Tokens are estimated at four characters each — close enough for a budget, and
independent of any tokenizer. The newest earlier turns are kept first; when some are
dropped, the system prompt says how many.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.agents.base import RecalledMemory

__all__ = ["build_messages", "estimate_tokens", "render_parts"]

JSON = Mapping[str, Any]
_TEXT_MIME = ("text/", "application/json", "application/xml", "application/yaml", "application/csv")


def estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _fenced(data: Any) -> str:
    body = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    return f"```json\n{body}\n```"


def _file(part: JSON, max_chars: int) -> str:
    file = part.get("file") or {}
    name = file.get("name") or "unnamed"
    mime = file.get("mimeType") or "application/octet-stream"
    label = f"[File: {name} ({mime})"
    raw = file.get("bytes")
    if raw and mime.startswith(_TEXT_MIME) and max_chars > 0:
        try:
            text = base64.b64decode(raw, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return f"{label}, not readable as text]"
        cut = (
            f"\n[… {len(text) - max_chars} more characters not shown]"
            if len(text) > max_chars
            else ""
        )
        return f"{label}]\n```\n{text[:max_chars]}\n```{cut}"
    if file.get("uri"):
        return f"{label} at {file['uri']}, not shown]"
    return f"{label}, not shown]"


def render_parts(parts: Sequence[JSON], max_file_chars: int) -> str:
    """Text parts as they are, DataParts as fenced JSON, FileParts by name and type (text
    files inlined up to ``max_file_chars``)."""
    out: list[str] = []
    for part in parts:
        kind = part.get("kind")
        if kind == "text":
            out.append(str(part.get("text", "")))
        elif kind == "data":
            out.append(_fenced(part.get("data")))
        elif kind == "file":
            out.append(_file(part, max_file_chars))
    return "\n\n".join(p for p in out if p)


def _referenced(task: JSON, max_file_chars: int) -> str:
    tid = task.get("id", "?")
    status = task.get("status") or {}
    lines = [f"[Referenced task {tid} — state: {status.get('state', 'unknown')}]"]
    for artifact in task.get("artifacts") or ():
        name = artifact.get("name") or artifact.get("artifactId") or "artifact"
        lines.append(
            f'Artifact "{name}":\n{render_parts(artifact.get("parts") or (), max_file_chars)}'
        )
    message = status.get("message")
    if message:
        lines.append(
            f"Final status message:\n{render_parts(message.get('parts') or (), max_file_chars)}"
        )
    lines.append(f"[End of referenced task {tid}]")
    return "\n".join(lines)


def _history(
    history: Sequence[JSON], budget: int, max_file_chars: int
) -> tuple[list[dict[str, Any]], int]:
    """Earlier turns as chat messages, newest kept first within ``budget`` tokens; and how
    many were dropped."""
    turns = [
        {"role": "user" if m.get("role") == "user" else "assistant", "content": content}
        for m in history
        if (content := render_parts(m.get("parts") or (), max_file_chars))
    ]
    kept: list[dict[str, Any]] = []
    used = 0
    for turn in reversed(turns):
        used += estimate_tokens(turn["content"])
        if used > budget:
            break
        kept.append(turn)
    kept.reverse()
    while kept and kept[0]["role"] == "assistant":  # never open with an answer to a dropped turn
        kept.pop(0)
    return kept, len(turns) - len(kept)


def build_messages(
    *,
    system_prompt: str,
    history: Sequence[JSON],
    referenced: Sequence[JSON],
    message: JSON,
    memory: RecalledMemory | None,
    history_budget: int,
    max_file_chars: int,
) -> list[dict[str, Any]]:
    """The Chat Completions ``messages`` for one run."""
    turns, dropped = _history(history, history_budget, max_file_chars)
    user = render_parts(message.get("parts") or (), max_file_chars)
    system = system_prompt.strip()
    if dropped > 0:
        note = f"Note: {dropped} earlier message(s) of this conversation were omitted."
        system = f"{system}\n\n{note}" if system else note
    pieces: list[str] = []
    if memory is not None and memory.header not in user and memory.header not in system:
        if memory.inject_as == "instructions":
            system = f"{system}\n\n{memory.block}" if system else memory.block
        else:
            pieces.append(memory.block)
    pieces.extend(_referenced(task, max_file_chars) for task in referenced)
    pieces.append(user)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    messages.extend(turns)
    messages.append({"role": "user", "content": "\n\n".join(p for p in pieces if p)})
    return messages
