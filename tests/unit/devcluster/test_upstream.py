"""The pure parts of devcluster.upstream: when NVIDIA's build is required, and how the chart's
container environment and command are resolved."""

from __future__ import annotations

from pathlib import Path

import pytest

from computedomain.devcluster.podrunner import PodRunError, expand
from computedomain.devcluster.upstream import (
    UpstreamBuild,
    UpstreamUnavailableError,
    container_environment,
    controller_entrypoint,
    find_upstream,
    upstream_required,
)


@pytest.mark.parametrize(
    ("env", "required"),
    [
        ({}, False),
        ({"CI": "false"}, False),
        ({"CI": "true"}, True),
        ({"CI": "TRUE"}, True),
        ({"NVIDIA_DRA_DRIVER_SRC": "/x.tar.gz"}, True),
        ({"NVIDIA_DRA_DRIVER_SRC": ""}, False),
        ({"COMPUTEDOMAIN_REQUIRE_UPSTREAM": "1"}, True),
    ],
)
def test_upstream_required(env: dict[str, str], required: bool) -> None:
    assert upstream_required(env) is required


def test_container_environment_resolves_values_and_field_refs() -> None:
    container = {
        "env": [
            {"name": "LOG_VERBOSITY", "value": "4"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "PPROF_PATH"},  # `value: ""` as the apiserver returns it
        ]
    }
    assert container_environment(container, "pod-0", "driver") == {
        "LOG_VERBOSITY": "4",
        "POD_NAME": "pod-0",
        "NAMESPACE": "driver",
        "PPROF_PATH": "",
    }


def test_container_environment_refuses_what_it_cannot_resolve() -> None:
    container = {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}
    with pytest.raises(PodRunError, match="env X: only values and fieldRefs"):
        container_environment(container, "pod-0", "driver")


def test_expand_follows_kubernetes_variable_references() -> None:
    env = {"LOG_VERBOSITY": "6"}
    assert expand("$(LOG_VERBOSITY)", env) == "6"
    assert expand("-v=$(LOG_VERBOSITY)", env) == "-v=6"
    assert expand("$(UNKNOWN)", env) == "$(UNKNOWN)"


def test_a_named_bin_dir_must_hold_the_build(tmp_path: Path) -> None:
    with pytest.raises(UpstreamUnavailableError, match="compute-domain-controller"):
        find_upstream(env={"NVIDIA_UPSTREAM_BIN": str(tmp_path / "bin")})
    assert UpstreamBuild(tmp_path / "bin").templates == tmp_path / "templates"


def test_nvidias_controller_container_runs_the_build_through_run_sh(tmp_path: Path) -> None:
    argv = controller_entrypoint(UpstreamBuild(tmp_path / "bin"))
    container = {"command": ["compute-domain-controller", "-v", "$(LOG_VERBOSITY)"]}
    assert argv(container)[2:] == [
        str(tmp_path / "bin"),
        "compute-domain-controller",
        "-v",
        "$(LOG_VERBOSITY)",
    ]
    assert argv(container)[1].endswith("hack/upstream/run.sh")
    with pytest.raises(PodRunError, match="unexpected controller command"):
        argv({"command": ["sh", "-c", "true"]})
