"""Bad configuration and unusable surroundings stop the real console script with one clear
line and a non-zero exit, never a traceback (issue 9, items 2 and 3). Run against the real
control plane's kubeconfig, so only the one bad setting is wrong."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from computedomain.devcluster.controlplane import ControlPlane

pytestmark = pytest.mark.integration

CONTROLLER_SCRIPT = Path(sys.executable).with_name("computedomain-controller")


def run(env: dict[str, str], home: Path) -> tuple[int, list[str]]:
    done = subprocess.run(
        [str(CONTROLLER_SCRIPT)],
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "LOG_FORMAT": "json", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Log records are JSON lines; what a person reads is everything else.
    lines = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if line.strip() and not line.startswith("{")
    ]
    return done.returncode, lines


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("ORPHAN_SWEEP_INTERVAL", "0", "at least 10s"),
        ("RECONCILE_TIMEOUT", "0", "at least 1s"),
        ("NAMESPACE", "Not_A_Namespace", "'Not_A_Namespace' is not a valid namespace name"),
        ("ADDITIONAL_NAMESPACES", ",,Bad_NS,,", "'Bad_NS' is not a valid namespace name"),
        ("CD_DAEMON_IMAGE_PULL_SECRET_NAMES", "a b,,UPPER", "'a b' is not a valid Secret name"),
        ("LEADER_ELECTION_LEASE_LOCK_NAME", "Bad Lease", "not a valid Lease name"),
        ("LEADER_ELECTION_RETRY_PERIOD", "0", "at least 0.1s"),
        ("METRICS_PATH", "metrics", "must start with '/'"),
        ("WORKERS", "0", "must be 1 to 256"),
        ("IMAGE_NAME", "registry/x: v1", "contains white space"),
        ("KUBECONFIG", "/nonexistent/kubeconfig", "/nonexistent/kubeconfig is not a file"),
    ],
)
def test_a_bad_setting_exits_2_with_one_line(
    control_plane: ControlPlane, tmp_path: Path, setting: str, value: str, says: str
) -> None:
    env = {"KUBECONFIG": str(control_plane.kubeconfig), setting: value}
    code, lines = run(env, tmp_path)
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("computedomain-controller: "), lines
    assert setting in lines[0]
    assert says in lines[0]


def test_unusable_credentials_and_a_busy_port_exit_1_with_one_line(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    garbage = tmp_path / "garbage.kubeconfig"
    garbage.write_text("clusters: [\n  ::: not yaml")
    empty_home = tmp_path / "home"
    empty_home.mkdir()
    cases = {
        "garbage kubeconfig": ({"KUBECONFIG": str(garbage)}, "not valid YAML"),
        "no kubeconfig, not in a pod": ({"KUBECONFIG": ""}, "no credentials"),
    }
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cases["port in use"] = (
            {
                "KUBECONFIG": str(control_plane.kubeconfig),
                "HTTP_ENDPOINT": f"127.0.0.1:{port}",
                "LEADER_ELECTION_ENABLED": "false",
            },
            f"cannot listen on 127.0.0.1:{port}",
        )
        for what, (env, says) in cases.items():
            code, lines = run(env, empty_home)
            print(f"{what}: exit {code}: {lines}")
            assert code == 1, (what, lines)
            assert len(lines) == 1, (what, lines)
            assert says in lines[0], (what, lines)


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"IMEX_MODE": "hostManaged"},
            'imex.mode="hostManaged" requires the HostManagedIMEXDaemon feature gate to be enabled',
        ),
        ({"IMEX_MODE": "host"}, 'unknown imex.mode "host"'),
        ({"IMEX_ISOLATION": "pod"}, 'unknown imex.isolation "pod": must be "domain" or "channel"'),
        (
            {"IMEX_ISOLATION": "channel"},
            "not supported yet: per-workload IMEX channel allocation is not implemented",
        ),
    ],
    ids=["host-without-gate", "unknown-mode", "unknown-isolation", "channel-isolation"],
)
def test_an_impossible_imex_setting_exits_2_with_upstreams_line(
    control_plane: ControlPlane, tmp_path: Path, env: dict[str, str], line: str
) -> None:
    code, lines = run({"KUBECONFIG": str(control_plane.kubeconfig), **env}, tmp_path)
    assert (code, lines) == (2, [f"computedomain-controller: {line}"])
