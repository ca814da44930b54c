"""The pure parts of the NVIDIA-daemon runner: probes as the kubelet reads them from the
DaemonSet, and the record the nvidia-imex stand-in keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from computedomain.devcluster.imexdaemon import Probe, StandinImex
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
