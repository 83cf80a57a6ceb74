"""Where webhooks may go. By default: public https destinations, and nothing else — a host
that is a loopback, private, link-local, multicast or metadata address (or an IPv6 form
carrying one) is refused when the config is set, a name when a delivery connects, after
resolution, to the very address checked. GATEWAY_PUSH_ALLOWLIST admits more (a loopback
receiver), GATEWAY_PUSH_RESTRICT only the list. A URL whose port is no port is a 400, for
webhooks and registered agents alike."""

from __future__ import annotations

import datetime
import ipaddress
import socket
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from cryptography.x509.oid import NameOID

from gateway.outbound import OutboundRefused, guarded_client
from gateway.outbound.addresses import Address, is_public
from gateway.push.destinations import WebhookPolicy
from gateway.store.keys import PUSH_DEAD
from tests.conftest import API_KEYS, AppFactory, RawRedis, auth, message
from tests.waiting import until
from tests.webhook_receiver import WebhookReceiver

SETTINGS: dict[str, Any] = {
    "api_keys": orjson.dumps(API_KEYS).decode(),
    "push_backoff_first_seconds": 0.05,
    "push_backoff_max_seconds": 0.2,
}
REFUSED = [
    "https://127.0.0.1/hook",
    "https://10.1.2.3/hook",
    "https://172.16.0.1/hook",
    "https://192.168.1.1/hook",
    "https://169.254.169.254/latest/meta-data",  # cloud metadata
    "https://100.100.100.200/latest",  # a metadata service in shared address space
    "https://0.0.0.0/hook",
    "https://224.0.0.1/hook",  # multicast
    "https://[::1]/hook",
    "https://[fe80::1]/hook",
    "https://[fd00:ec2::254]/hook",  # metadata, IPv6
    "https://[ff02::1]/hook",
    "https://[64:ff9b::a9fe:a9fe]/hook",  # NAT64 of 169.254.169.254
    "https://[64:ff9b::a00:1]/hook",  # NAT64 of 10.0.0.1
    "https://[::ffff:10.0.0.1]/hook",  # IPv4-mapped
    "https://[::7f00:1]/hook",  # IPv4-compatible 127.0.0.1
    "https://[2002:c0a8:101::1]/hook",  # 6to4 of 192.168.1.1
    "https://localhost/hook",
    "https://ward.localhost/hook",
    "https://localhost./hook",
    "http://example.com/webhook",  # plain http
]
ADMITTED = ["https://example.com/webhook", "https://8.8.8.8/hook", "https://[2606:4700::1]/hook"]
BAD_PORTS = ["http://127.0.0.1:abc/hook", "http://127.0.0.1:99999/hook"]


@pytest.fixture
async def gateway(make_app: AppFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_app(**SETTINGS) as c:
        c.headers.update(auth("alice"))
        yield c


async def finished_task(gw: httpx.AsyncClient) -> str:
    """A completed task: a config set on it is stored but gets no event (no traffic)."""
    r = await gw.post("/v1/message:send", json={"message": message("hi")})
    assert r.status_code == 200 and r.json()["task"]["status"]["state"] == "completed", r.text
    return str(r.json()["task"]["id"])


async def set_config(gw: httpx.AsyncClient, task_id: str, url: str) -> httpx.Response:
    return await gw.post(f"/v1/tasks/{task_id}/pushNotificationConfigs", json={"url": url})


def refused_field(r: httpx.Response) -> str:
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "InvalidParamsError", r.text
    return str(r.json()["data"]["errors"][0]["field"])


async def test_public_https_is_admitted_and_inward_hosts_refused_by_default(
    gateway: httpx.AsyncClient,
) -> None:
    task_id = await finished_task(gateway)
    for url in REFUSED:
        r = await set_config(gateway, task_id, url)
        assert refused_field(r) == "pushNotificationConfig.url", url
    for n, url in enumerate(ADMITTED):  # names are resolved when delivered, not here
        r = await gateway.post(
            f"/v1/tasks/{task_id}/pushNotificationConfigs", json={"url": url, "id": f"c{n}"}
        )
        assert r.status_code == 200, (url, r.text)
    r = await gateway.get(f"/v1/tasks/{task_id}/pushNotificationConfigs")
    assert sorted(c["pushNotificationConfig"]["url"] for c in r.json()) == sorted(ADMITTED)


async def test_a_port_that_is_no_port_is_a_400(make_app: AppFactory) -> None:
    """Webhook configs (set, and carried by a send), and registered agents' URLs (create
    and patch): a port that is not a number or out of range is a 400, not a 500."""
    settings = {**SETTINGS, "push_allowlist": "127.0.0.1", "outbound_allowlist": "127.0.0.1:*"}
    async with make_app(**settings) as gw:
        gw.headers.update(auth("alice"))
        task_id = await finished_task(gw)
        spec = {"id": "llm", "name": "M", "type": "openai",
                "config": {"baseUrl": "http://127.0.0.1:9/v1", "model": "m"}}  # fmt: skip
        r = await gw.post("/agents", json=spec, headers=auth("admin"))
        assert r.status_code == 201, r.text
        for url in BAD_PORTS:
            assert refused_field(await set_config(gw, task_id, url)).endswith(".url"), url
            config = {"pushNotificationConfig": {"url": url}}
            r = await gw.post(
                "/v1/message:send", json={"message": message("hi"), "configuration": config}
            )
            assert refused_field(r).endswith(".url"), url
            bad = {**spec, "id": "other", "config": {"baseUrl": url, "model": "m"}}
            r = await gw.post("/agents", json=bad, headers=auth("admin"))
            assert refused_field(r) == "config.baseUrl", url
            r = await gw.patch(
                "/agents/llm", json={"config": {"baseUrl": url}}, headers=auth("admin")
            )
            assert refused_field(r) == "config.baseUrl", url
            remote = {"name": "R", "type": "a2a-remote", "config": {"cardUrl": url}}
            r = await gw.post("/agents", json=remote, headers=auth("admin"))
            assert refused_field(r) == "config.cardUrl", url


def _inward_name() -> str:
    """This host's name, if it resolves only to non-public addresses (as a name a tenant
    could point anywhere)."""
    name = socket.gethostname()
    try:
        found = {ipaddress.ip_address(i[4][0]) for i in socket.getaddrinfo(name, 443)}
    except OSError:
        pytest.skip("this host's name does not resolve")
    if not found or any(is_public(a) for a in found):
        pytest.skip("this host's name resolves to a public address")
    return name


async def test_a_name_resolving_inward_is_refused_at_delivery(
    gateway: httpx.AsyncClient, redis: RawRedis
) -> None:
    """A name passes when the config is set; the delivery resolves it, finds a non-public
    address and gives the event up without connecting."""
    url = f"https://{_inward_name()}/hook"
    config = {"pushNotificationConfig": {"url": url}}
    r = await gateway.post(
        "/v1/message:send", json={"message": message("hi"), "configuration": config}
    )
    assert r.status_code == 200, r.text
    await until(lambda: redis.xlen(PUSH_DEAD), what="the event given up")
    (_, fields), *_ = await redis.xrange(PUSH_DEAD)
    assert b"resolves to a non-public address" in fields[b"reason"]


async def test_the_push_allowlist_admits_a_loopback_receiver_by_name(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """As the TCK runs: a receiver on localhost, named in GATEWAY_PUSH_ALLOWLIST with its
    port, gets its events over plain http; the same host on another port is refused, and
    public https is still admitted."""
    hook = WebhookReceiver().start()
    try:
        async with make_app(**SETTINGS, push_allowlist=f"localhost:{hook.port}") as gw:
            gw.headers.update(auth("alice"))
            url = f"http://localhost:{hook.port}/hook"
            config = {"pushNotificationConfig": {"url": url}}
            r = await gw.post(
                "/v1/message:send", json={"message": message("hi"), "configuration": config}
            )
            assert r.status_code == 200, r.text
            await until(
                lambda: any(d.json()["status"]["state"] == "completed" for d in hook.accepted),
                what="the receiver on localhost",
            )
            task_id = await finished_task(gw)
            r = await set_config(gw, task_id, f"http://localhost:{hook.port + 1}/hook")
            assert refused_field(r) == "pushNotificationConfig.url"
            r = await set_config(gw, task_id, "https://example.com/webhook")
            assert r.status_code == 200, r.text
    finally:
        hook.stop()


async def test_restrict_admits_only_the_list(make_app: AppFactory) -> None:
    settings = {**SETTINGS, "push_allowlist": "127.0.0.1", "push_restrict": "true"}
    async with make_app(**settings) as gw:
        gw.headers.update(auth("alice"))
        task_id = await finished_task(gw)
        r = await set_config(gw, task_id, "https://example.com/webhook")
        assert refused_field(r) == "pushNotificationConfig.url"
        assert "GATEWAY_PUSH_ALLOWLIST" in r.json()["data"]["errors"][0]["reason"]
        r = await set_config(gw, task_id, "http://127.0.0.1:9/hook")
        assert r.status_code == 200, r.text


class Rebinding:
    """A resolver whose answer changes after the first: what a DNS rebinding attacker's
    name server does."""

    def __init__(self, first: str, then: str) -> None:
        self.answers = [ipaddress.ip_address(first), ipaddress.ip_address(then)]
        self.calls = 0

    async def __call__(self, host: str, port: int) -> Sequence[Address]:
        self.calls += 1
        return [self.answers[min(self.calls, 2) - 1]]


async def test_the_connection_goes_to_the_address_checked() -> None:
    """The name is resolved once per connection, and the connection made to the address
    that was checked: a name that answers an allowed address, then an internal one, never
    reaches the internal service; once it answers the internal one, it is refused."""
    allowed = WebhookReceiver().start()
    internal = WebhookReceiver(host="127.0.0.2", port=allowed.port).start()
    policy = WebhookPolicy(["*.rebind.test", "127.0.0.1"])  # 127.0.0.2 is not listed
    resolver = Rebinding("127.0.0.1", "127.0.0.2")
    url = f"http://hook.rebind.test:{allowed.port}/hook"
    try:
        async with guarded_client(policy, resolver=resolver, timeout=30) as http:
            r = await http.post(url, content=b"{}")
            assert r.status_code == 204 and resolver.calls == 1
        async with guarded_client(policy, resolver=resolver, timeout=30) as http:
            with pytest.raises(httpx.ConnectError) as refused:
                await http.post(url, content=b"{}")
            assert isinstance(refused.value.__cause__, OutboundRefused)
        assert len(allowed.accepted) == 1 and internal.attempts == 0
    finally:
        allowed.stop()
        internal.stop()


def _certificates(tmp: Path, name: str) -> tuple[str, str, str]:
    """A test CA's certificate file, and a certificate and key for ``name`` it signed."""
    now = datetime.datetime.now(datetime.UTC)

    def issued(subject: str, key: Any, issuer: str, signer: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = issued("test CA", ca_key, "test CA", ca_key, True)
    leaf = issued(name, key, "test CA", ca_key, False)
    files = {"ca.pem": ca.public_bytes(Encoding.PEM), "leaf.pem": leaf.public_bytes(Encoding.PEM),
             "leaf.key": key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())}  # fmt: skip
    for file, data in files.items():
        (tmp / file).write_bytes(data)
    return str(tmp / "ca.pem"), str(tmp / "leaf.pem"), str(tmp / "leaf.key")


async def test_tls_is_verified_for_the_host_name_not_the_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection goes to the checked address, while TLS (SNI and the certificate's
    name) is the URL's host's: a receiver whose certificate names the host is reached; the
    same receiver under another name is refused by certificate verification."""
    ca, certificate, key = _certificates(tmp_path, "hook.tls.test")
    monkeypatch.setenv("SSL_CERT_FILE", ca)  # the client trusts the test CA only
    hook = WebhookReceiver(tls=(certificate, key)).start()

    async def loopback(host: str, port: int) -> Sequence[Address]:
        return [ipaddress.ip_address("127.0.0.1")]

    policy = WebhookPolicy(["hook.tls.test", "other.tls.test"])
    try:
        async with guarded_client(policy, resolver=loopback, timeout=30) as http:
            r = await http.post(f"https://hook.tls.test:{hook.port}/hook", content=b"{}")
            assert r.status_code == 204
            with pytest.raises(httpx.ConnectError, match="certificate"):
                await http.post(f"https://other.tls.test:{hook.port}/hook", content=b"{}")
        assert len(hook.accepted) == 1
    finally:
        hook.stop()


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700::1", True),
        ("64:ff9b::808:808", True),  # NAT64 of a public address
        ("127.0.0.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("224.0.0.1", False),  # is_global says True on Python 3.11
        ("ff0e::1", False),  # likewise
        ("64:ff9b::a00:1", False),  # likewise: NAT64 of 10.0.0.1
        ("64:ff9b:1::a00:1", False),
        ("::7f00:1", False),  # likewise: IPv4-compatible 127.0.0.1
        ("::ffff:0:a00:1", False),  # likewise: IPv4-translated 10.0.0.1
        ("::ffff:7f00:1", False),
        ("2002:a00:1::1", False),  # 6to4 of 10.0.0.1
        ("fd00:ec2::254", False),
    ],
)
def test_public_addresses(address: str, public: bool) -> None:
    assert is_public(ipaddress.ip_address(address)) is public


def test_a_push_allowlist_port_that_is_no_port_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway.configuration import ConfigurationError, load_settings

    monkeypatch.setenv("GATEWAY_PUSH_ALLOWLIST", "localhost:8888,[::1]:80,10.0.0.0/8:*")
    assert load_settings().push_allowlist == ["localhost:8888", "[::1]:80", "10.0.0.0/8:*"]
    for bad in ("localhost:abc", "localhost:99999"):
        monkeypatch.setenv("GATEWAY_PUSH_ALLOWLIST", bad)
        with pytest.raises(ConfigurationError, match="GATEWAY_PUSH_ALLOWLIST"):
            load_settings()
