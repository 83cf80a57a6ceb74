"""No log line carries an outbound URL's path or query, or a header's value: a real
`gateway serve` at DEBUG calls a webhook, a model and an embedder, each with secrets in
its path, query and headers, and none of them is in any line it logs."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import orjson

from gateway.logs import redact_urls
from tests.conftest import API_KEYS
from tests.embeddings_server import EmbeddingsServer
from tests.openai_server import ChatServer
from tests.processes import serving, slow_process_test
from tests.waiting import until_sync
from tests.webhook_receiver import WebhookReceiver


def test_urls_are_cut_to_scheme_and_host() -> None:
    line = 'HTTP Request: POST https://u:pw@h.example:8443/p/ZZ1/hook?k=S "HTTP/1.1 200 OK"'
    assert redact_urls(line) == 'HTTP Request: POST https://h.example:8443 "HTTP/1.1 200 OK"'
    assert redact_urls("url='http://[::1]:80/a?b=c'") == "url='http://[::1]:80'"


@slow_process_test
def test_no_log_line_carries_an_outbound_path_query_or_header(
    tmp_path: Path, redis_url: str
) -> None:
    s = f"ZZPHI{uuid.uuid4().hex[:12]}"
    secrets = {
        "webhook path": f"{s}-hookpath",
        "webhook query": f"{s}-hookquery",
        "webhook token": f"{s}-hooktoken",
        "webhook credentials": f"{s}-hookcred",
        "model path": f"{s}-modelpath",
        "model key": f"{s}-modelkey",
        "embedder path": f"{s}-embpath",
        "embedder key": f"{s}-embkey",
        "message": f"{s}-content",
    }
    chat = ChatServer(prefix=f"/{secrets['model path']}").start()
    embedder = EmbeddingsServer(prefix=f"/{secrets['embedder path']}").start()
    hook = WebhookReceiver().start()
    hook_url = (
        f"http://127.0.0.1:{hook.port}/patient/{secrets['webhook path']}/hook"
        f"?apikey={secrets['webhook query']}"
    )
    env = {
        "REDIS_URL": redis_url,
        "GATEWAY_LOG_LEVEL": "DEBUG",
        "GATEWAY_API_KEYS": orjson.dumps(API_KEYS).decode(),
        "GATEWAY_OUTBOUND_ALLOWLIST": f"127.0.0.1:{chat.port}",
        "GATEWAY_PUSH_ALLOWLIST": f"127.0.0.1:{hook.port}",
        "GATEWAY_EMBEDDER": "openai",
        "GATEWAY_EMBEDDER_URL": embedder.url,
        "GATEWAY_EMBEDDER_MODEL": embedder.model,
        "GATEWAY_EMBEDDER_API_KEY": secrets["embedder key"],
    }
    try:
        with serving(tmp_path, **env) as (_, base), httpx.Client(base_url=base, timeout=60) as c:
            spec = {
                "id": "llm",
                "name": "Assistant",
                "type": "openai",
                "config": {"baseUrl": chat.url, "model": chat.model, "maxRetries": 0,
                           "apiKey": secrets["model key"]},
            }  # fmt: skip
            r = c.post("/agents", json=spec, headers={"Authorization": "Bearer key-admin"})
            assert r.status_code == 201, r.text
            config = {
                "url": hook_url,
                "token": secrets["webhook token"],
                "authentication": {"schemes": ["Bearer"], "credentials": secrets["webhook credentials"]},
            }  # fmt: skip
            body = {
                "message": {"role": "user", "messageId": uuid.uuid4().hex,
                            "parts": [{"kind": "text", "text": secrets["message"]}]},
                "configuration": {"pushNotificationConfig": config},
            }  # fmt: skip
            r = c.post(
                "/agents/llm/v1/message:send",
                json=body,
                headers={"Authorization": "Bearer key-alice"},
            )
            assert r.status_code == 200, r.text
            assert r.json()["task"]["status"]["state"] == "completed", r.text
            until_sync(
                lambda: any(d.json()["status"]["state"] == "completed" for d in hook.accepted),
                what="the completed task at the webhook",
            )
            until_sync(lambda: embedder.calls, what="a call to the embedder")
        assert chat.auth and secrets["model key"] in str(chat.auth[0])
        assert hook.accepted[0].headers["x-a2a-notification-token"] == secrets["webhook token"]
    finally:
        chat.stop()
        embedder.stop()
        hook.stop()
    logged = "".join(p.read_text() for p in tmp_path.glob("serve-*.log"))
    assert '"level":"debug"' in logged  # DEBUG was on
    found = [what for what, secret in secrets.items() if secret in logged]
    assert found == [], f"in the log: {found}"
    assert s not in logged
