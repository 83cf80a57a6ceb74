"""PHI at rest: what a copy of the Redis files, or of its values, reveals of patient data.

A sentinel string sent in text, a DataPart, a file name and metadata is looked for in every
file under the data directory and, with encryption, in every Redis value.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import message
from tests.processes import serving, slow_process_test
from tests.waiting import until


def sentinel_message(sentinel: str, **fields: Any) -> dict[str, Any]:
    """A message carrying ``sentinel`` in every place content can hide."""
    return message(
        f"Latest vitals attached. {sentinel}",
        {"kind": "data", "data": {"note": sentinel, "vitals": {"bp": "120/80"}}},
        {
            "kind": "file",
            "file": {
                "name": f"{sentinel}.pdf",
                "mimeType": "application/pdf",
                "bytes": base64.b64encode(b"%PDF-1.4").decode(),
            },
        },
        metadata={"ward": sentinel},
        **fields,
    )


def files_holding(root: Path, needle: str) -> list[str]:
    """The files under ``root`` whose bytes hold ``needle``."""
    found = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and needle.encode() in path.read_bytes():
                found.append(str(path.relative_to(root)))
        except OSError:
            continue  # a file replaced while it was read (a rewrite's temporary file)
    return found


@slow_process_test
async def test_a_scrub_leaves_no_trace_on_disk_within_the_bound(tmp_path: Path) -> None:
    sentinel = f"SENTINEL-{uuid.uuid4().hex}"
    data = tmp_path / ".data"
    env = {"GATEWAY_SCRUB_REWRITE_SECONDS": "1", "GATEWAY_ENCRYPTION": "off"}
    with serving(tmp_path, **env) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=60) as c:
            body = {"message": sentinel_message(sentinel)}
            r = await c.post("/v1/message:send", json=body)
            assert r.status_code == 200, r.text
            context_id = r.json()["task"]["contextId"]
            # Unencrypted, the text reaches the append-only file (fsync every second)
            await until(
                lambda: files_holding(data, sentinel), what="the sentinel on disk", logs=tmp_path
            )
            assert (await c.delete(f"/v1/contexts/{context_id}")).status_code == 204
            await until(
                lambda: not files_holding(data, sentinel),
                what="the scrubbed sentinel to leave every file of the data directory",
                logs=tmp_path,
            )
