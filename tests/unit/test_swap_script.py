"""hack/swap.sh's checks that need no cluster: they answer in one line and ask nothing of it
(kubectl and helm are stand-ins that log every call). What the swap does to a cluster is
tests/integration/test_swap.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from computedomain.devcluster.assets import REPO_ROOT

SCRIPT = REPO_ROOT / "hack" / "swap.sh"


def run(
    tmp_path: Path, *args: str, answers: str = "exit 1", **env: str
) -> tuple[int, list[str], list[str]]:
    """Exit code, the script's output lines, and every kubectl/helm call it made (the stand-in
    logs each, then runs the shell snippet ``answers``: by default it fails)."""
    calls = tmp_path / "calls"
    tool = tmp_path / "tool"
    tool.write_text(f'#!/usr/bin/env bash\necho "$0 $*" >> {calls}\n{answers}\n')
    tool.chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if k not in ("IMAGE", "NS")}
    environ.update(KUBECTL=str(tool), HELM=str(tool), **env)
    done = subprocess.run(
        ["bash", str(SCRIPT), *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    made = calls.read_text().splitlines() if calls.exists() else []
    return done.returncode, (done.stdout + done.stderr).splitlines(), made


@pytest.mark.parametrize(
    ("image", "says"),
    [
        (None, "IMAGE is not set"),
        ("", "IMAGE is not set"),
        ("computedomain-controller", "not an image reference with a tag"),
        ("ghcr.io/Acme/computedomain-controller:0.1.0", "not an image reference with a tag"),
        ("registry:5000/computedomain-controller", "not an image reference with a tag"),
        ("a b:1", "not an image reference with a tag"),
        ("ghcr.io/acme/cd:1@sha256:abc", "not an image reference with a tag"),
    ],
)
def test_in_without_a_usable_image_stops_before_asking_the_cluster(
    tmp_path: Path, image: str | None, says: str
) -> None:
    env = {} if image is None else {"IMAGE": image}
    code, lines, calls = run(tmp_path, "in", "helm", **env)
    assert code != 0
    assert len(lines) == 1, lines
    assert lines[0].startswith("swap.sh: preflight: "), lines
    assert says in lines[0], lines
    assert calls == []


@pytest.mark.parametrize(
    "image",
    [
        "computedomain-controller:0.1.0",
        "ghcr.io/acme/computedomain-controller:v0.1.0-rc.1",
        "localhost:5000/computedomain-controller:1.10",
        "registry.example.com:443/a/b/computedomain-controller:0.1@sha256:" + "0" * 64,
    ],
)
def test_well_formed_images_pass_the_image_check(tmp_path: Path, image: str) -> None:
    # The next check asks the cluster its version: the stand-in kubectl answers nothing.
    code, lines, calls = run(tmp_path, "in", "helm", IMAGE=image)
    assert code != 0
    assert lines == [
        "swap.sh: preflight: the cluster does not answer: kubectl get --raw /version: "
    ]
    assert [call.split(" ", 1)[1] for call in calls] == ["get --raw /version"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "usage: "),
        (("sideways",), "usage: "),
        (("in", "operator"), "unknown method 'operator'"),
        (("in", "helm", "--dry"), "unknown option '--dry'"),
        (("in", "helm", "kustomize"), "usage: "),
        (("out", "--dry-run", "--force"), "unknown option '--force'"),
    ],
)
def test_bad_arguments_are_one_line(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    code, lines, calls = run(tmp_path, *args, IMAGE="computedomain-controller:0.1.0")
    assert code != 0
    assert len(lines) == 1, lines
    assert says in lines[0], lines
    assert calls == []


@pytest.mark.parametrize("timeout", ["abc", "3min", "1.5m", "-1s"])
def test_a_timeout_the_script_cannot_wait_is_one_line_before_the_cluster(
    tmp_path: Path, timeout: str
) -> None:
    """TIMEOUT bounds kubectl's waits and the script's own (the stand-by, the probe pod)."""
    code, lines, calls = run(
        tmp_path, "in", "helm", IMAGE="computedomain-controller:0.1.0", TIMEOUT=timeout
    )
    assert code != 0
    assert lines == [
        f"swap.sh: preflight: TIMEOUT={timeout} is not a duration like 180s, 3m or 1h"
    ], lines
    assert calls == []


@pytest.mark.parametrize(
    ("deployments", "says"),
    [
        ("", "no Deployment named dra-driver-nvidia-gpu-controller or "
         "nvidia-dra-driver-gpu-controller in any namespace: is NVIDIA's chart installed? "
         "(set NS, or NVIDIA_DEPLOYMENT)"),
        ("a dra-driver-nvidia-gpu-controller\\nb nvidia-dra-driver-gpu-controller",
         "NVIDIA's controller Deployment is in more than one place "
         "(a/dra-driver-nvidia-gpu-controller b/nvidia-dra-driver-gpu-controller): set NS"),
    ],
    ids=["none", "two"],
)  # fmt: skip
def test_without_ns_nvidias_namespace_must_be_one(
    tmp_path: Path, deployments: str, says: str
) -> None:
    """Without NS the script looks for NVIDIA's controller Deployment in every namespace, and
    refuses in one line, before any change, unless exactly one namespace has one."""
    answers = (
        'case "$*" in\n'
        "  'get --raw /version') echo '{\"gitVersion\": \"v1.34.1\"}' ;;\n"
        f"  'get deployments --all-namespaces '*) printf '{deployments}' ;;\n"
        "  *) exit 1 ;;\n"
        "esac"
    )
    code, lines, calls = run(
        tmp_path, "in", "kustomize", answers=answers, IMAGE="computedomain-controller:0.1.0"
    )
    assert code != 0
    assert lines == [f"swap.sh: {says}"], lines
    assert [call.split()[1] for call in calls] == ["get", "get"], calls  # reads only


def test_help_is_the_header_and_asks_nothing(tmp_path: Path) -> None:
    code, lines, calls = run(tmp_path, "--help")
    assert code == 0
    assert lines[0].startswith("The swap of docs/operations.md as a script"), lines
    assert any(line.startswith("Environment: IMAGE") for line in lines), lines
    assert calls == []
