import ipaddress
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from computedomain.devcluster.components import (
    KWOK_STAGE_DIR,
    POD_CIDR,
    SERVICE_CIDR,
    kcm_args,
    kwok_configuration_yaml,
)
from computedomain.devcluster.controlplane import (
    ETCD_DIR_PREFIX,
    OWNER_FILE,
    ControlPlane,
    free_port,
    sweep_stale_etcd_dirs,
    use_existing_cluster,
)
from computedomain.devcluster.pki import generate_pki, kubeconfig_yaml


def test_kwok_configuration_comes_first_then_the_project_stages() -> None:
    documents = list(yaml.safe_load_all(kwok_configuration_yaml()))
    assert documents[0]["kind"] == "KwokConfiguration"
    assert documents[0]["options"]["manageNodesWithAnnotationSelector"] == "kwok.x-k8s.io/node=fake"
    stages = {d["metadata"]["name"]: d for d in documents[1:]}
    assert all(d["kind"] == "Stage" for d in documents[1:])
    assert set(stages) == {
        "node-initialize",
        "node-heartbeat",
        "node-not-ready",
        "pod-ready",
        "pod-delete",
        "pod-container-running-failed",
    }
    # Job pods must not finish instantly.
    assert "pod-complete" not in stages


def test_a_slower_node_heartbeat_changes_only_that_stage_and_kcms_grace(tmp_path: Path) -> None:
    def stages(text: str) -> dict[str, dict[str, Any]]:
        return {d["metadata"]["name"]: d for d in list(yaml.safe_load_all(text))[1:]}

    stock = stages(kwok_configuration_yaml())
    slow = stages(kwok_configuration_yaml(node_heartbeat_s=300))
    assert slow["node-heartbeat"]["spec"]["delay"] == {
        "durationMilliseconds": 180_000,
        "jitterDurationMilliseconds": 420_000,
    }
    assert stock["node-heartbeat"]["spec"]["delay"]["durationMilliseconds"] == 20_000
    del slow["node-heartbeat"]["spec"]["delay"], stock["node-heartbeat"]["spec"]["delay"]
    assert slow == stock

    pki = generate_pki(tmp_path / "pki")
    grace = [a for a in kcm_args(tmp_path / "k", pki, 1, 300) if "grace" in a]
    assert grace == ["--node-monitor-grace-period=840s"]  # twice the longest gap, 420 s
    assert "--node-monitor-grace-period=90s" in kcm_args(tmp_path / "k", pki, 1)


def test_project_pod_ready_leaves_dra_pods_to_the_simulator() -> None:
    stage = yaml.safe_load((KWOK_STAGE_DIR / "pod-ready.yaml").read_text())
    expressions = stage["spec"]["selector"]["matchExpressions"]
    assert {"key": ".spec.resourceClaims", "operator": "DoesNotExist"} in expressions


def test_pod_cidr_is_disjoint_from_the_service_range() -> None:
    assert not ipaddress.ip_network(POD_CIDR).overlaps(ipaddress.ip_network(SERVICE_CIDR))


def test_free_ports_are_distinct_and_unprivileged() -> None:
    ports = {free_port() for _ in range(5)}
    assert len(ports) == 5
    assert all(port > 1024 for port in ports)


def test_pki_identities_and_serving_names(tmp_path: Path) -> None:
    pki = generate_pki(tmp_path)
    serving = x509.load_pem_x509_certificate(pki.serving_cert.read_bytes())
    san = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} == {
        "127.0.0.1",
        "10.0.0.1",
    }
    assert "localhost" in san.get_values_for_type(x509.DNSName)

    def subject(path: Path) -> str:
        return x509.load_pem_x509_certificate(path.read_bytes()).subject.rfc4514_string()

    assert "O=system:masters" in subject(pki.admin.cert)
    assert subject(pki.controller_manager.cert) == "CN=system:kube-controller-manager"
    assert subject(pki.scheduler.cert) == "CN=system:kube-scheduler"
    assert pki.sa_private_key.stat().st_mode & 0o077 == 0


def test_existing_cluster_is_read_from_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pki = generate_pki(tmp_path / "pki")
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_yaml("https://127.0.0.1:6443", pki.ca_cert, "admin", pki.admin))
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.setenv("USE_EXISTING_CLUSTER", "true")
    assert use_existing_cluster()
    cp = ControlPlane.start()
    assert cp.server == "https://127.0.0.1:6443"
    assert cp.ca_file == pki.ca_cert
    assert not cp.owned
    cp.stop()  # starts nothing, stops nothing


def test_plain_kubeconfig_does_not_switch_to_an_existing_cluster() -> None:
    assert not use_existing_cluster({"KUBECONFIG": "/somewhere"})


def test_stale_etcd_dirs_are_swept_but_live_and_foreign_ones_kept(tmp_path: Path) -> None:
    stale = tmp_path / f"{ETCD_DIR_PREFIX}dead"
    stale.mkdir()
    (stale / OWNER_FILE).write_text("999999999")  # no such pid
    live = tmp_path / f"{ETCD_DIR_PREFIX}live"
    live.mkdir()
    (live / OWNER_FILE).write_text(str(os.getpid()))  # alive, but not an etcd: stale too
    starting = tmp_path / f"{ETCD_DIR_PREFIX}starting"  # no owner file yet
    starting.mkdir()
    foreign = tmp_path / "something-else"
    foreign.mkdir()
    removed = sweep_stale_etcd_dirs(tmp_path)
    assert sorted(removed) == sorted([stale, live])
    assert starting.exists()
    assert foreign.exists()
