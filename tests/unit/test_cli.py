"""The `computedomain-controller` console script: help lists every setting with its environment
variable, and a setting that cannot work stops the process with exit code 2 and one clear
line, before anything connects to a cluster."""

from __future__ import annotations

import asyncio
import importlib.metadata
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from computedomain import cli
from computedomain.cli import EXIT_CONFIG, main
from computedomain.config import Settings

CONTROLLER_SCRIPT = Path(sys.executable).with_name("computedomain-controller")
IMAGE = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.0"

# The Deployment's environment (NVIDIA's names where NVIDIA has one, so our image drops into an
# existing install), plus our own knobs. A rename here breaks installs: keep it explicit.
ENV_VARS = (
    "KUBECONFIG",
    "NAMESPACE",
    "ADDITIONAL_NAMESPACES",
    "IMAGE_NAME",
    "CD_DAEMON_IMAGE_PULL_SECRET_NAMES",
    "LOG_VERBOSITY_CD_DAEMON",
    "MAX_NODES_PER_IMEX_DOMAIN",
    "FEATURE_GATES",
    "CD_DAEMON_PRIORITY_CLASS_NAME",
    "POD_NAME",
    "LEADER_ELECTION_ENABLED",
    "LEADER_ELECTION_LEASE_LOCK_NAME",
    "LEADER_ELECTION_LEASE_LOCK_NAMESPACE",
    "LEADER_ELECTION_LEASE_DURATION",
    "LEADER_ELECTION_RENEW_DEADLINE",
    "LEADER_ELECTION_RETRY_PERIOD",
    "KUBE_API_QPS",
    "KUBE_API_BURST",
    "HTTP_ENDPOINT",
    "METRICS_PATH",
    "PROBE_ADDRESS",
    "LOG_VERBOSITY",
    "LOG_FORMAT",
    "WORKERS",
    "RECONCILE_TIMEOUT",
    "ORPHAN_SWEEP_INTERVAL",
    "ORPHAN_GRACE_PERIOD",
    "DAEMON_POD_WAIT_TIMEOUT",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets: the developer's KUBECONFIG etc. must not leak in."""
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


class NoResolver:
    """Stands in for the credential child: these tests never reach a cluster."""

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def started(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """Settings the controller would have started with: a test never reaches a cluster, and
    leaves the process-wide logging and metrics setup alone."""
    runs: list[Settings] = []

    async def fake_run_controller(settings: Settings, stop: asyncio.Event, **_: Any) -> None:
        runs.append(settings)

    # cli imports run_controller when it starts, from here.
    monkeypatch.setattr("computedomain.app.run_controller", fake_run_controller)
    monkeypatch.setattr(cli, "ResolverRun", lambda kubeconfig: NoResolver())
    # cli imports these after starting the credential child, from here.
    monkeypatch.setattr("computedomain.observability.logging.configure_logging", lambda **_: None)
    monkeypatch.setattr("prometheus_client.disable_created_metrics", lambda: None)
    return runs


def exit_code(argv: list[str]) -> int:
    """What the console script would exit with (argparse errors raise SystemExit)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def test_help_lists_every_environment_variable(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(["--help"]) == 0
    out = capsys.readouterr().out
    # "[ENV]" or "[ENV; accepted range]"
    missing = [name for name in ENV_VARS if f"[{name}]" not in out and f"[{name};" not in out]
    assert not missing, f"--help does not name {missing}"
    assert "usage: computedomain-controller" in out


def test_console_script_help_runs() -> None:
    """The installed entry point, not only the function behind it."""
    done = subprocess.run(
        [str(CONTROLLER_SCRIPT), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "[IMAGE_NAME; non-empty" in done.stdout


def test_help_and_config_errors_do_not_load_the_client_stack() -> None:
    # kubernetes_asyncio takes seconds to import; --help and a bad setting should not wait.
    probe = (
        "import sys\n"
        "from computedomain import cli\n"
        "codes = []\n"
        "for argv in (['--help'], ['--no-such-flag']):\n"
        "    try:\n"
        "        codes.append(cli.main(argv))\n"
        "    except SystemExit as done:\n"
        "        codes.append(done.code)\n"
        "print(codes, 'kubernetes_asyncio' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[0, 2] False"


def test_empty_image_exits_2_naming_the_setting(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(["--image-name", ""]) == EXIT_CONFIG == 2
    err = capsys.readouterr().err
    assert err.startswith("computedomain-controller: ")
    assert "IMAGE_NAME" in err
    assert "Traceback" not in err


def test_unknown_flag_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("IMAGE_NAME", IMAGE)
    assert exit_code(["--no-such-flag", "x"]) == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "value", "message"),
    [
        ("LEADER_ELECTION_ENABLED", "maybe", "--leader-election-enabled: invalid boolean 'maybe'"),
        ("FEATURE_GATES", "Nope=true", "--feature-gates: unknown feature gate 'Nope'"),
        ("FEATURE_GATES", "IMEXDaemonsWithDNSNames=false", "requires IMEXDaemonsWithDNSNames"),
        ("LOG_FORMAT", "xml", "want json or text"),
        ("WORKERS", "0", "--workers / WORKERS: must be 1 to 256"),
        ("WORKERS", "many", "--workers: 'many' is not an integer"),
        (
            "MAX_NODES_PER_IMEX_DOMAIN",
            "0",
            "--max-nodes-per-imex-domain / MAX_NODES_PER_IMEX_DOMAIN: must be 1 to 2048",
        ),
        ("LEADER_ELECTION_LEASE_DURATION", "5s", "lease duration > renew deadline"),
        (
            "LEADER_ELECTION_RETRY_PERIOD",
            "soon",
            "--leader-election-retry-period: invalid duration 'soon'",
        ),
        ("HTTP_ENDPOINT", "localhost:http", "--http-endpoint: invalid bind address"),
        ("ORPHAN_GRACE_PERIOD", "5 seconds", "--orphan-grace-period: invalid duration"),
        ("KUBE_API_QPS", "0", "--kube-api-qps / KUBE_API_QPS: must be > 0"),
        pytest.param(
            "KUBE_API_QPS",
            "abc",
            "kube-api-qps",
            id="KUBE_API_QPS-not-a-number",
        ),
        pytest.param(
            "HTTP_ENDPOINT",
            "127.0.0.1:99999",
            "port",
            id="HTTP_ENDPOINT-port-out-of-range",
        ),
    ],
)
def test_bad_setting_exits_2_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    started: list[Settings],
    env: str,
    value: str,
    message: str,
) -> None:
    monkeypatch.setenv("IMAGE_NAME", IMAGE)
    monkeypatch.setenv(env, value)
    assert exit_code([]) == 2
    assert not started
    err = capsys.readouterr().err
    assert err.startswith("computedomain-controller: "), err
    assert message in err
    assert len(err.strip().splitlines()) == 1, err


def test_flag_wins_over_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], started: list[Settings]
) -> None:
    monkeypatch.setenv("IMAGE_NAME", IMAGE)
    monkeypatch.setenv("LOG_FORMAT", "xml")
    assert exit_code(["--log-format", "text", "--workers", "3"]) == 0
    assert [(s.log_format, s.workers) for s in started] == [("text", 3)]

    monkeypatch.setenv("LOG_FORMAT", "json")
    assert exit_code(["--log-format", "xml"]) == 2
    assert "want json or text" in capsys.readouterr().err
    assert len(started) == 1


def test_valid_environment_starts_the_controller(
    monkeypatch: pytest.MonkeyPatch, started: list[Settings]
) -> None:
    monkeypatch.setenv("IMAGE_NAME", IMAGE)
    monkeypatch.setenv("NAMESPACE", "nvidia-dra-driver-gpu")
    monkeypatch.setenv("POD_NAME", "controller-0")
    assert exit_code([]) == 0
    (settings,) = started
    assert settings.driver_namespace == "nvidia-dra-driver-gpu"
    assert settings.lease_namespace == "nvidia-dra-driver-gpu"
    assert settings.pod_name == "controller-0"
    assert settings.daemon.image == IMAGE


def test_version_prints_the_distribution_version(capsys: pytest.CaptureFixture[str]) -> None:
    # No IMAGE_NAME or other setting needed: --version answers before settings are checked.
    assert exit_code(["--version"]) == 0
    version = importlib.metadata.version("computedomain")
    assert capsys.readouterr().out == f"computedomain-controller {version}\n"


def test_console_script_version_does_not_load_the_client_stack() -> None:
    probe = (
        "import sys\n"
        "from computedomain import cli\n"
        "try:\n"
        "    cli.main(['--version'])\n"
        "except SystemExit as done:\n"
        "    print(done.code, 'kubernetes_asyncio' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("computedomain-controller ")
    assert lines[-1] == "0 False"
