"""deploy/k8s and the Dockerfile as a cluster's policies see them: checkov's checks pass (each
rule skipped says why, in place), every pod meets the Pod Security "restricted" profile,
/metrics stays off the API's Service, and each Deployment has its disruption budget,
autoscaler, network policy and scrape target."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"


def _docs() -> list[dict[str, Any]]:
    return [
        d for path in sorted(K8S.rglob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d
    ]


def _kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in _docs() if d["kind"] == kind]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _skips() -> dict[str, list[str]]:
    """Rule id -> the reasons given where it is skipped (k8s annotations, Dockerfile)."""
    found: dict[str, list[str]] = {}
    for doc in _docs():
        for key, value in doc["metadata"].get("annotations", {}).items():
            if key.startswith("checkov.io/skip"):
                rule, _, why = value.partition("=")
                found.setdefault(rule, []).append(why)
    for rule, why in re.findall(
        r"#\s*checkov:skip=(\w+):(.*)", (DEPLOY / "Dockerfile").read_text()
    ):
        found.setdefault(rule, []).append(why)
    return found


@pytest.mark.timeout(300)
def test_checkov_passes_on_the_manifests_and_the_image() -> None:
    checkov = shutil.which("checkov", path=str(Path(sys.executable).parent))
    assert checkov, "checkov is a dev dependency (make install)"
    done = subprocess.run(
        [
            *(checkov, "-d", str(DEPLOY), "--framework", "kubernetes", "dockerfile"),
            *("--skip-download", "--compact", "--output", "json"),
        ],
        capture_output=True,
        timeout=280,
        env={"PATH": str(Path(sys.executable).parent), "BC_SKIP_MAPPING": "TRUE"},
    )
    reports = orjson.loads(done.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    assert {r["check_type"] for r in reports} == {"kubernetes", "dockerfile"}
    for report in reports:
        summary = report["summary"]
        failed = [
            (c["check_id"], c["resource"]) for c in report["results"].get("failed_checks", [])
        ]
        assert summary["failed"] == 0 and not failed, failed
        assert summary["parsing_errors"] == 0, report["check_type"]
        assert summary["passed"] > 50, summary
        skipped = {c["check_id"] for c in report["results"].get("skipped_checks", [])}
        reasons = _skips()
        for rule in skipped:
            assert rule in reasons, f"{rule} skipped without a reason in place"
            assert all(len(why.strip()) >= 20 for why in reasons[rule]), reasons[rule]


def test_every_pod_meets_the_restricted_profile() -> None:
    (namespace,) = _kind("Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    deployments = _kind("Deployment")
    assert {d["metadata"]["name"] for d in deployments} == {"gateway", "gateway-worker"}
    for deployment in deployments:
        assert deployment["metadata"]["namespace"] == namespace["metadata"]["name"]
        pod = deployment["spec"]["template"]["spec"]
        # No GATEWAY_PORT=tcp://... from a Service named "gateway" reaches the settings.
        assert pod["enableServiceLinks"] is False
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert "startupProbe" in container
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert {"/tmp", "/var/lib/gateway"} <= mounts  # writable, the rest read-only


def test_metrics_stay_off_the_api_service() -> None:
    services = {s["metadata"]["name"]: s for s in _kind("Service")}
    api = services["gateway"]
    assert [p["targetPort"] for p in api["spec"]["ports"]] == ["http", "grpc"]
    for deployment in _kind("Deployment"):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        metrics = _env(container)["GATEWAY_METRICS_PORT"]
        named = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert named["metrics"] == int(metrics)
    for policy in _kind("NetworkPolicy"):
        for rule in policy["spec"]["ingress"]:
            if any(p["port"] == 9100 for p in rule["ports"]):
                (source,) = rule["from"]
                assert source["namespaceSelector"]["matchLabels"] == {
                    "kubernetes.io/metadata.name": "monitoring"
                }


def test_each_deployment_has_a_budget_an_autoscaler_a_policy_and_a_scrape() -> None:
    (monitor,) = _kind("ServiceMonitor")
    scraped = {
        s["spec"]["selector"]["app"]
        for s in _kind("Service")
        if s["metadata"].get("labels", {}).items()
        >= monitor["spec"]["selector"]["matchLabels"].items()
    }
    for deployment in _kind("Deployment"):
        name = deployment["metadata"]["name"]
        labels = deployment["spec"]["selector"]["matchLabels"]
        budgets = [
            b
            for b in _kind("PodDisruptionBudget")
            if b["spec"]["selector"]["matchLabels"] == labels
        ]
        assert budgets, f"{name}: no PodDisruptionBudget"
        scalers = [
            h
            for h in _kind("HorizontalPodAutoscaler")
            if h["spec"]["scaleTargetRef"]["name"] == name
        ]
        assert scalers and scalers[0]["spec"]["minReplicas"] >= 2, name
        policies = [
            p for p in _kind("NetworkPolicy") if p["spec"]["podSelector"]["matchLabels"] == labels
        ]
        assert policies, f"{name}: no NetworkPolicy"
        assert labels["app"] in scraped, f"{name}: not scraped"
