"""The pure parts of the NVIDIA-daemon runner: probes as the kubelet reads them from the
DaemonSet, and the record the nvidia-imex stand-in keeps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from computedomain.devcluster.cdi import DeviceNode, Injected, Mount
from computedomain.devcluster.imexdaemon import DaemonRuntime, NvidiaImexDaemon, Probe, StandinImex
from computedomain.devcluster.podrunner import PodRunError

# NVIDIA's daemon DaemonSet's startup probe (its template; ours writes the same).
STARTUP = {
    "exec": {"command": ["compute-domain-daemon", "-v", "$(LOG_VERBOSITY)", "check"]},
    "initialDelaySeconds": 0,
    "periodSeconds": 1,
    "timeoutSeconds": 10,
    "failureThreshold": 1200,
    "successThreshold": 1,
}


def test_an_exec_probe_is_read_with_the_containers_variables_expanded() -> None:
    probe = Probe.of(STARTUP, {"LOG_VERBOSITY": "4"})
    assert probe == Probe(
        command=("compute-domain-daemon", "-v", "4", "check"),
        initial_delay=0.0,
        period=1.0,
        timeout=10.0,
        success_threshold=1,
        failure_threshold=1200,
    )


def test_a_probe_without_settings_gets_the_kubelets_defaults() -> None:
    probe = Probe.of({"exec": {"command": ["true"]}}, {})
    assert probe is not None
    assert (probe.period, probe.timeout, probe.success_threshold, probe.failure_threshold) == (
        10.0,
        1.0,
        1,
        3,
    )
    assert Probe.of(None, {}) is None


def test_a_probe_the_stand_in_kubelet_cannot_run_is_refused() -> None:
    with pytest.raises(PodRunError, match="only exec probes"):
        Probe.of({"httpGet": {"path": "/healthz", "port": 8080}}, {})


def test_the_stand_in_record_gives_the_peers_of_the_last_start_or_sigusr1(tmp_path: Path) -> None:
    imex = StandinImex(tmp_path)
    assert imex.peers() is None
    (tmp_path / "events").write_text(
        "1.0 10 start peers=10.200.0.1\n"
        "2.0 10 SIGUSR1 peers=10.200.0.1,10.200.0.2\n"
        "3.0 10 SIGTERM peers=\n"
    )
    assert imex.events() == [
        ("start", 10, ("10.200.0.1",)),
        ("SIGUSR1", 10, ("10.200.0.1", "10.200.0.2")),
        ("SIGTERM", 10, ()),
    ]
    assert imex.peers() == ("10.200.0.1", "10.200.0.2")
    imex.never_ready()
    assert (tmp_path / "never-ready").exists()
    imex.never_ready(False)
    assert not (tmp_path / "never-ready").exists()


# -- the daemon claim prepared by a real kubelet plugin (DaemonRuntime.kubelet) --------------

DAEMON_POD: dict[str, Any] = {
    "metadata": {"namespace": "nvidia-dra-driver-gpu", "name": "cd-daemon-x", "uid": "p-1"},
    "spec": {"nodeName": "node-0"},
}
PLUGIN_IMEXD = "/var/lib/kubelet/plugins/compute-domain.nvidia.com/domains/cd-1"
# What NVIDIA's plugin returns for a daemon claim on a fabric node (its CDI edits, merged).
INJECTED = Injected(
    env={"CLIQUE_ID": "uuid.3", "COMPUTE_DOMAIN_UUID": "cd-1", "COMPUTE_DOMAIN_NAME": "train"},
    device_nodes=(DeviceNode(path="/dev/nvidia-caps/nvidia-cap7", type="c", major=511, minor=7),),
    mounts=(Mount(host_path=PLUGIN_IMEXD, container_path="/imexd"),),
    hooks=(),
)


@dataclass
class PluginKubelet:
    nodes: frozenset[str]

    def serves(self, node_name: str) -> bool:
        return node_name in self.nodes

    async def prepare(self, pod: Mapping[str, Any]) -> Injected | None:
        return INJECTED

    async def unprepare(self, pod: Mapping[str, Any]) -> None:
        return None


def daemon_on(
    tmp_path: Path, nodes: frozenset[str], without_cdi: frozenset[str] = frozenset()
) -> NvidiaImexDaemon:
    runtime = DaemonRuntime(
        build=cast(Any, None),
        admin=cast(Any, None),
        server="https://127.0.0.1:6443",
        ca_file=tmp_path / "ca.crt",
        workdir=tmp_path,
        without_cdi=without_cdi,
        kubelet=lambda ctx: PluginKubelet(nodes),
    )
    return NvidiaImexDaemon(cast(Any, object()), dict(DAEMON_POD), "cd-1", runtime)


def test_a_daemon_on_a_node_of_a_real_plugin_gets_exactly_the_plugins_cdi_edits(
    tmp_path: Path,
) -> None:
    daemon = daemon_on(tmp_path, frozenset({"node-0"}))
    assert daemon.kubelet is not None
    daemon.injected = INJECTED
    cd = {"metadata": {"name": "other", "namespace": "elsewhere"}}
    assert daemon._cdi_edits(cd) == dict(INJECTED.env)
    binds = daemon._cdi_binds()
    device_file = tmp_path / "nvidia-dra-driver-gpu.cd-daemon-x" / "devices" / "0-nvidia-cap7"
    assert binds == [
        "--bind",
        f"{PLUGIN_IMEXD}:/imexd",
        "--bind",
        f"{device_file}:/dev/nvidia-caps/nvidia-cap7",
    ]
    assert device_file.read_text() == "c 511:7\n"


def test_a_daemon_elsewhere_or_without_cdi_does_not_get_the_plugins_edits(tmp_path: Path) -> None:
    elsewhere = daemon_on(tmp_path, frozenset({"node-1"}))
    assert elsewhere.kubelet is None
    assert elsewhere._cdi_binds() == ["--bind", f"{elsewhere.imexd}:/imexd"]
    dropped = daemon_on(tmp_path, frozenset({"node-0"}), without_cdi=frozenset({"node-0"}))
    dropped.injected = INJECTED
    assert dropped._cdi_binds() == []
    assert dropped._cdi_edits({}) == {}
