"""The secrets of an operator's configuration in the tests: the settings that hold them,
and the values no summary, error or log line may print."""

from __future__ import annotations

SECRETS = {
    "GATEWAY_API_KEYS": '{"sk-live-4f9a2c": {"tenant": "t1", "user": "alice", "roles": '
    '["admin"]}, "sk-live-77d0e1": {"tenant": "t2", "user": "bob"}}',
    "GATEWAY_EMBEDDER_API_KEY": "emb-key-0c1d2e",
    "GATEWAY_CORTADEL_URL": "http://cortadel.invalid:3001",
    "GATEWAY_CORTADEL_API_KEY": "cortadel-key-5b6a",
    "GATEWAY_CORTADEL_TENANT_KEYS": '{"t1": "tenant-key-8e8e"}',
    "GATEWAY_CORTADEL_USER_IDS": "hashed",
    "GATEWAY_CORTADEL_USER_ID_SECRET": "hmac-secret-0123456789",
}
SECRET_VALUES = (
    "sk-live-4f9a2c",
    "sk-live-77d0e1",
    "emb-key-0c1d2e",
    "cortadel-key-5b6a",
    "tenant-key-8e8e",
    "hmac-secret-0123456789",
)
