"""The `computedomain-controller` console script: help lists every setting with its environment
variable, and a setting that cannot work stops the process with exit code 2 and one clear
line, before anything connects to a cluster."""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

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
# NVIDIA's other names (its klog/component-base flags and pprof), accepted here as well.
NVIDIA_ENV_VARS = (
    "V",
    "LOGGING_FORMAT",
    "PPROF_PATH",
    "VMODULE",
    "LOG_FLUSH_FREQUENCY",
    "LOG_JSON_INFO_BUFFER_SIZE",
    "LOG_JSON_SPLIT_STREAM",
    "LOG_TEXT_INFO_BUFFER_SIZE",
    "LOG_TEXT_SPLIT_STREAM",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets: the developer's KUBECONFIG etc. must not leak in."""
    for name in (*ENV_VARS, *NVIDIA_ENV_VARS):
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
    # "[ENV]", "[ENV; accepted range]" or "[ENV or NVIDIA_ENV; ...]"
    missing = [name for name in ENV_VARS if not re.search(rf"\[{name}(\]|;|\s+or\s)", out)]
    assert not missing, f"--help does not name {missing}"
    assert "usage: computedomain-controller" in out


def test_console_script_help_runs() -> None:
    """The installed entry point, not only the function behind it."""
    done = subprocess.run(
        [str(CONTROLLER_SCRIPT), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "[IMAGE_NAME; an image reference" in done.stdout


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


def test_image_with_white_space_exits_2_naming_the_setting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert exit_code(["--image-name", "registry/x: v1"]) == EXIT_CONFIG == 2
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
        ("FEATURE_GATES", "Nope=true", "--feature-gates: unrecognized feature gate: Nope"),
        ("FEATURE_GATES", "MPSSupport", "--feature-gates: missing bool value for MPSSupport"),
        ("VMODULE", "abc", "--vmodule / VMODULE: 'abc' does not have the pattern=N format"),
        ("LOGGING_FORMAT", "yaml", "want json or text"),
        ("LOG_FLUSH_FREQUENCY", "often", "invalid duration 'often'"),
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


# ---- NVIDIA's command line (issue 17) ------------------------------------------------------------

NVIDIA_CHART = yaml.safe_load(
    (
        Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-chart" / "controller.yaml"
    ).read_text()
)
FIELD_REFS = {"metadata.name": "dra-driver-nvidia-gpu-controller-7d9f8-x2x4q",
              "metadata.namespace": "dra-driver-nvidia-gpu"}  # fmt: skip


def kubelet_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the kubelet gives it (fieldRefs resolved)."""
    env = {}
    for item in container["env"]:
        ref = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        env[item["name"]] = FIELD_REFS[ref] if ref else item["value"]
    return env


def kubelet_command(container: dict[str, Any], env: dict[str, str]) -> list[str]:
    """The command with $(VAR) expanded from the environment, as the kubelet does."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg) for arg in container["command"]]


def test_nvidias_deployment_command_and_env_run_unchanged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, started: list[Settings]
) -> None:
    """NVIDIA's v0.4.1 chart's controller container, as helm renders it, with our image."""
    container = NVIDIA_CHART["container"]
    env = kubelet_env(container)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    argv = kubelet_command(container, env)
    assert argv == ["compute-domain-controller", "-v", "4"]
    # The image's PATH finds NVIDIA's name: the package installs it beside ours.
    assert Path(sys.executable).with_name(argv[0]).is_file()
    with caplog.at_level(logging.INFO, logger="computedomain"):
        assert exit_code(argv[1:]) == 0
    (settings,) = started
    assert settings.log_verbosity == 4
    assert settings.driver_namespace == "dra-driver-nvidia-gpu"
    assert settings.pod_name == FIELD_REFS["metadata.name"]
    assert settings.daemon.image == "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"
    assert settings.daemon.image_pull_secrets == ("regcred",)
    assert settings.leader_election is False
    assert settings.lease_name == "dra-driver-nvidia-gpu-controller"
    # FEATURE_GATES=ContextualLogging=false,MPSSupport=true,: both accepted, logged once, and
    # our gates keep their defaults.
    assert settings.daemon.feature_gates["ComputeDomainCliques"] is True
    ignored = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Ignored:")]
    assert len(ignored) == 1, ignored  # PPROF_PATH is empty: nothing to say about it
    assert "ContextualLogging=false,MPSSupport=true" in ignored[0]


def test_the_installed_nvidia_name_runs() -> None:
    script = CONTROLLER_SCRIPT.with_name("compute-domain-controller")
    done = subprocess.run(
        [str(script), "--v", "4", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "--pprof-path" in done.stdout


@pytest.mark.parametrize(
    ("argv", "verbosity"),
    [(["--v", "4"], 4), (["-v", "4"], 4), (["--v=6"], 6), (["-v=2"], 2), (["-v", "12"], 12)],
)
def test_v_is_klog_verbosity_never_version(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    started: list[Settings],
    argv: list[str],
    verbosity: int,
) -> None:
    monkeypatch.setenv("IMAGE_NAME", IMAGE)
    assert exit_code(argv) == 0
    assert [s.log_verbosity for s in started] == [verbosity]
    assert "computedomain-controller 0" not in capsys.readouterr().out  # not --version


@pytest.mark.parametrize("argv", [["--ver"], ["--kubeconf", "x"], ["--feature", "A=true"]])
def test_no_prefix_abbreviations(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    monkeypatch.setenv("IMAGE_NAME", IMAGE)
    assert exit_code(argv) == 2
    assert f"unrecognized arguments: {argv[0]}" in capsys.readouterr().err


@pytest.mark.parametrize("source", ["flag", "env"])
def test_unknown_feature_gate_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    started: list[Settings],
    source: str,
) -> None:
    monkeypatch.setenv("IMAGE_NAME", IMAGE)
    gates = "MPSSupport=true,NoSuchGate=true"
    if source == "env":
        monkeypatch.setenv("FEATURE_GATES", gates)
    assert exit_code(["--feature-gates", gates] if source == "flag" else []) == 2
    assert not started
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    # NVIDIA's binary: "... for flag -feature-gates: unrecognized feature gate: NoSuchGate"
    assert err.startswith(
        "computedomain-controller: --feature-gates: unrecognized feature gate: NoSuchGate "
    )
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "gates",
    [
        "MPSSupport=true",  # the GPU plugin's, reaching the controller through the chart
        "ContextualLogging=false,LoggingAlphaOptions=true,LoggingBetaOptions=false",
        "TimeSlicingSettings=True,DynamicMIG=1,NVMLDeviceHealthCheck=f,PassthroughSupport=F,",
        "DeviceMetadata=false,AllAlpha=false",
        "FabricManagerPartitioning=true,DRAListTypeAttributes=true,ConsumableShares=true",
    ],
)
def test_nvidias_other_gates_are_accepted_and_logged_once(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    started: list[Settings],
    gates: str,
) -> None:
    monkeypatch.setenv("IMAGE_NAME", IMAGE)
    monkeypatch.setenv("FEATURE_GATES", gates)
    with caplog.at_level(logging.INFO, logger="computedomain"):
        assert exit_code([]) == 0
    (settings,) = started
    assert dict(settings.daemon.feature_gates) == {
        "IMEXDaemonsWithDNSNames": True,
        "ComputeDomainCliques": True,
        "CrashOnNVLinkFabricErrors": True,
        "HostManagedIMEXDaemon": False,
    }
    ignored = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Ignored:")]
    named = [g.split("=")[0] for g in gates.split(",") if g and not g.startswith("AllAlpha")]
    assert len(ignored) == 1, ignored
    assert all(f"{name}=" in ignored[0] for name in named), ignored


def test_every_flag_of_nvidias_binary_is_accepted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, started: list[Settings]
) -> None:
    """Each flag `compute-domain-controller --help` of NVIDIA's v0.4.1 lists, Go-style spellings
    included (one dash, `=`, bool flags without a value)."""
    argv = [
        "-pod-name=p", "--namespace", "ns", "-image-name", IMAGE,
        "--cd-daemon-image-pull-secret-names=a,b", "--log-verbosity-cd-daemon", "6",
        "--max-nodes-per-imex-domain", "18", "--http-endpoint=:8080", "--metrics-path", "/m",
        "--pprof-path", "/debug/pprof", "--additional-namespaces", "x",
        "--additional-namespaces=y,z", "--feature-gates", "MPSSupport=true",
        "--kube-api-qps", "5", "--kube-api-burst", "10",
        "--leader-election-enabled", "--leader-election-lease-duration", "15s",
        "--leader-election-lease-lock-name", "l", "--leader-election-lease-lock-namespace", "ns",
        "--leader-election-renew-deadline", "10s", "--leader-election-retry-period", "2s",
        "--log-flush-frequency", "5s", "--log-json-info-buffer-size", "2Ki",
        "--log-json-split-stream", "--log-text-info-buffer-size=0", "-log-text-split-stream=false",
        "--logging-format", "text", "--vmodule", "controller*=6,informer=2", "-v", "3",
    ]  # fmt: skip
    with caplog.at_level(logging.INFO, logger="computedomain"):
        assert exit_code(argv) == 0
    (s,) = started
    assert (s.pod_name, s.driver_namespace, s.log_verbosity, s.log_format) == ("p", "ns", 3, "text")
    assert s.reconciler.additional_namespaces == ("x", "y", "z")
    assert s.leader_election is True
    assert s.daemon.log_verbosity == 6
    ignored = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Ignored:")]
    for flag in ("--pprof-path", "--vmodule", "--log-flush-frequency", "--log-json-split-stream"):
        assert sum(flag + " /" in line for line in ignored) == 1, (flag, ignored)


def test_nvidias_environment_names_are_read(
    monkeypatch: pytest.MonkeyPatch, started: list[Settings]
) -> None:
    nvidia_env = {"IMAGE_NAME": IMAGE, "V": "5", "LOGGING_FORMAT": "text",
                  "PPROF_PATH": "/debug/pprof", "VMODULE": "a=1",
                  "LOG_FLUSH_FREQUENCY": "5s", "LOG_JSON_SPLIT_STREAM": "true"}  # fmt: skip
    for name, value in nvidia_env.items():
        monkeypatch.setenv(name, value)
    assert exit_code([]) == 0
    (s,) = started
    assert (s.log_verbosity, s.log_format) == (5, "text")
    assert [n.split(" /")[0] for n in s.notices] == [
        "--pprof-path", "--vmodule", "--log-flush-frequency", "--log-json-split-stream",
    ]  # fmt: skip
    # Ours win over NVIDIA's names when both are set.
    monkeypatch.setenv("LOG_VERBOSITY", "1")
    monkeypatch.setenv("LOG_FORMAT", "json")
    assert exit_code([]) == 0
    assert (started[-1].log_verbosity, started[-1].log_format) == (1, "json")


def test_help_explains_nvidias_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code(["--help"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA's flags without effect here" in out
    for name in NVIDIA_ENV_VARS:
        assert re.search(rf"[\[ ]{name}[;\]]", out), name
    for flag in ("-v LOG_VERBOSITY, --v LOG_VERBOSITY", "--logging-format", "--vmodule"):
        assert flag in out, flag
