"""Typed settings for the controller, read from flags with environment-variable fallbacks.

Every flag has an environment variable; where NVIDIA's controller has one, the name is the same,
so our Deployment can be swapped into an existing NVIDIA DRA driver install unchanged.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from computedomain.api import constants as c

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

# Gates our controller knows, with NVIDIA v0.4.0 defaults (contract §15).
KNOWN_FEATURE_GATES: Mapping[str, bool] = {
    c.GATE_DNS_NAMES: True,
    c.GATE_CLIQUES: True,
    c.GATE_CRASH_ON_FABRIC_ERRORS: True,
}


class ConfigError(ValueError):
    """A flag or environment variable holds a value that cannot work."""


def parse_duration(text: str) -> float:
    """Seconds from a Go-style duration ("15s", "1m30s", "250ms") or a plain number of seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ConfigError(f"invalid duration {text!r} (use e.g. 15s, 1m30s, 250ms)")
    return total


def parse_feature_gates(text: str) -> dict[str, bool]:
    """Known gates with defaults, overridden by "Name=true,Other=false," (trailing comma ok)."""
    gates = dict(KNOWN_FEATURE_GATES)
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or value.lower() not in ("true", "false"):
            raise ConfigError(f"invalid feature gate {item!r} (want Name=true or Name=false)")
        if name in c.NVIDIA_OTHER_FEATURE_GATES:
            continue
        if name not in KNOWN_FEATURE_GATES:
            known = ", ".join(sorted(KNOWN_FEATURE_GATES))
            raise ConfigError(f"unknown feature gate {name!r} (known: {known})")
        gates[name] = value.lower() == "true"
    if gates[c.GATE_CLIQUES] and not gates[c.GATE_DNS_NAMES]:
        raise ConfigError(
            f"{c.GATE_CLIQUES}=true requires {c.GATE_DNS_NAMES}=true (NVIDIA's daemons refuse "
            "to start otherwise)"
        )
    return gates


def parse_bind_address(text: str) -> tuple[str, int]:
    """("0.0.0.0", 8080) from ":8080", "127.0.0.1:8080" or "8080"."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"invalid bind address {text!r} (want [host]:port, port 0-65535)")
    return host or "0.0.0.0", int(port)  # noqa: S104 - probes and metrics serve the pod network


def _bind(text: str) -> str | None:
    """A validated "[host]:port" string, or None when empty (endpoint disabled)."""
    if not text:
        return None
    parse_bind_address(text)
    return text if ":" in text else f":{text}"


def _split_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"invalid boolean {text!r}")


@dataclass(frozen=True)
class Settings:
    """Everything the controller process needs; built by `parse_settings`."""

    kubeconfig: str | None
    driver_namespace: str
    additional_namespaces: tuple[str, ...]
    image_name: str
    image_pull_secret_names: tuple[str, ...]
    daemon_log_verbosity: int
    max_nodes_per_imex_domain: int
    feature_gates: Mapping[str, bool]
    daemon_priority_class_name: str | None
    pod_name: str
    leader_election: bool
    lease_name: str
    lease_namespace: str
    lease_duration: float
    renew_deadline: float
    retry_period: float
    kube_api_qps: float
    kube_api_burst: int
    metrics_address: str | None
    metrics_path: str
    probe_address: str | None
    log_verbosity: int
    log_format: str
    workers: int
    reconcile_timeout: float
    orphan_sweep_interval: float
    orphan_grace_period: float
    daemon_pod_wait_timeout: float

    @property
    def managed_namespaces(self) -> tuple[str, ...]:
        """Namespaces where DaemonSets, daemon pods and cliques live (driver namespace first)."""
        ordered = [self.driver_namespace, *self.additional_namespaces]
        return tuple(dict.fromkeys(ordered))

    @property
    def cliques_enabled(self) -> bool:
        return bool(self.feature_gates[c.GATE_CLIQUES])


@dataclass(frozen=True)
class _Flag:
    name: str
    env: str
    default: str | None
    help: str
    metavar: str | None = None


_FLAGS: Sequence[_Flag] = (
    _Flag("--kubeconfig", "KUBECONFIG", None, "kubeconfig file; empty means in-cluster config"),
    _Flag(
        "--namespace",
        "NAMESPACE",
        "default",
        "driver namespace: where the IMEX DaemonSets, daemon RCTs and cliques live",
    ),
    _Flag(
        "--additional-namespaces",
        "ADDITIONAL_NAMESPACES",
        "",
        "comma-separated extra namespaces searched for DaemonSets, pods and cliques "
        "(after moving the driver to another namespace)",
    ),
    _Flag(
        "--image-name",
        "IMAGE_NAME",
        c.NVIDIA_DRIVER_IMAGE,
        "image of the IMEX daemon pods; must be NVIDIA's DRA driver image of the release the "
        "kubelet plugin runs (NVIDIA's chart passes its own image here)",
    ),
    _Flag(
        "--cd-daemon-image-pull-secret-names",
        "CD_DAEMON_IMAGE_PULL_SECRET_NAMES",
        "",
        "comma-separated image pull secrets copied into the daemon pod spec",
    ),
    _Flag(
        "--log-verbosity-cd-daemon",
        "LOG_VERBOSITY_CD_DAEMON",
        "4",
        "log verbosity passed to the IMEX daemons as LOG_VERBOSITY",
    ),
    _Flag(
        "--max-nodes-per-imex-domain",
        "MAX_NODES_PER_IMEX_DOMAIN",
        str(c.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN),
        "IMEX slots per clique passed to the daemons (18 on GB200/GB300 NVL72)",
    ),
    _Flag(
        "--feature-gates",
        "FEATURE_GATES",
        "",
        "Name=bool pairs, comma-separated: "
        + ", ".join(f"{k} (default {str(v).lower()})" for k, v in KNOWN_FEATURE_GATES.items())
        + "; NVIDIA's other gates ("
        + ", ".join(sorted(c.NVIDIA_OTHER_FEATURE_GATES))
        + ") are accepted and ignored, so NVIDIA's chart values carry over",
    ),
    _Flag(
        "--cd-daemon-priority-class-name",
        "CD_DAEMON_PRIORITY_CLASS_NAME",
        "",
        "optional priorityClassName for the IMEX daemon pods (empty: none, as upstream)",
    ),
    _Flag(
        "--pod-name",
        "POD_NAME",
        None,
        "this replica's pod name, the leader-election identity prefix (default: hostname)",
    ),
    _Flag(
        "--leader-election-enabled",
        "LEADER_ELECTION_ENABLED",
        "true",
        "elect a leader through a Lease; only the leader writes (true/false)",
    ),
    _Flag(
        "--leader-election-lease-lock-name",
        "LEADER_ELECTION_LEASE_LOCK_NAME",
        "nvidia-compute-domain-controller",
        "name of the leader-election Lease",
    ),
    _Flag(
        "--leader-election-lease-lock-namespace",
        "LEADER_ELECTION_LEASE_LOCK_NAMESPACE",
        "",
        "namespace of the Lease (default: the driver namespace)",
    ),
    _Flag(
        "--leader-election-lease-duration",
        "LEADER_ELECTION_LEASE_DURATION",
        "15s",
        "how long a standby waits on an unrenewed lease before taking over",
    ),
    _Flag(
        "--leader-election-renew-deadline",
        "LEADER_ELECTION_RENEW_DEADLINE",
        "10s",
        "how long the leader keeps retrying a renew before it gives up and exits",
    ),
    _Flag(
        "--leader-election-retry-period",
        "LEADER_ELECTION_RETRY_PERIOD",
        "2s",
        "interval between lease acquire/renew attempts",
    ),
    _Flag(
        "--kube-api-qps",
        "KUBE_API_QPS",
        "50",
        "client-side rate limit for API requests per second (upstream default 5 throttles large "
        "domains)",
    ),
    _Flag("--kube-api-burst", "KUBE_API_BURST", "100", "client-side burst above --kube-api-qps"),
    _Flag(
        "--http-endpoint",
        "HTTP_ENDPOINT",
        ":8080",
        "[host]:port serving Prometheus metrics; empty disables it",
    ),
    _Flag("--metrics-path", "METRICS_PATH", "/metrics", "HTTP path of the metrics endpoint"),
    _Flag(
        "--probe-address",
        "PROBE_ADDRESS",
        ":8081",
        "[host]:port serving /healthz and /readyz; empty disables it",
    ),
    _Flag(
        "--log-verbosity",
        "LOG_VERBOSITY",
        "0",
        "controller log verbosity: 0 state changes, 4 per-reconcile detail, 6 API chatter",
    ),
    _Flag("--log-format", "LOG_FORMAT", "json", "log format: json or text"),
    _Flag(
        "--workers",
        "WORKERS",
        "8",
        "concurrent reconciles (a ComputeDomain is never reconciled twice at once)",
    ),
    _Flag("--reconcile-timeout", "RECONCILE_TIMEOUT", "60s", "deadline of one reconcile"),
    _Flag(
        "--orphan-sweep-interval",
        "ORPHAN_SWEEP_INTERVAL",
        "10m",
        "period of the full sweep for children and node labels whose ComputeDomain is gone",
    ),
    _Flag(
        "--orphan-grace-period",
        "ORPHAN_GRACE_PERIOD",
        "5s",
        "how long an unknown ComputeDomain UID must stay unknown before its objects are removed",
    ),
    _Flag(
        "--daemon-pod-wait-timeout",
        "DAEMON_POD_WAIT_TIMEOUT",
        "60s",
        "on deletion, how long to wait for IMEX daemon pods to terminate before removing the "
        "finalizer anyway (with a Warning event)",
    ),
)


def distribution_version() -> str:
    """The installed `computedomain` distribution's version (what --version prints)."""
    try:
        return importlib.metadata.version("computedomain")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _dest(flag: _Flag) -> str:
    return flag.name.lstrip("-").replace("-", "_")


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="computedomain-controller",
        description=(
            "Runs the ComputeDomain controller: watches resource.nvidia.com/v1beta1 "
            "ComputeDomains, creates their IMEX daemon DaemonSet and ResourceClaimTemplates "
            "exactly as NVIDIA's DRA driver expects, projects daemon state into status, and "
            "cleans up on deletion. Every flag can also be set by the environment variable "
            "shown in brackets (flags win)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for flag in _FLAGS:
        default = env.get(flag.env, flag.default)
        parser.add_argument(
            flag.name,
            dest=_dest(flag),
            default=default,
            metavar=flag.metavar,
            help=f"{flag.help} [{flag.env}]",
        )
    parser.add_argument(
        "-v",
        dest="log_verbosity",
        help="shorthand for --log-verbosity [LOG_VERBOSITY]",
        default=argparse.SUPPRESS,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {distribution_version()}")
    return parser


def _int(value: str, name: str, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not an integer") from None
    if number < minimum:
        raise ConfigError(f"{name}: must be >= {minimum}, got {number}")
    return number


def settings_from_namespace(ns: argparse.Namespace) -> Settings:
    if not ns.image_name:
        raise ConfigError("--image-name / IMAGE_NAME must not be empty (NVIDIA's DRA driver image)")
    driver_namespace = ns.namespace or "default"
    lease_duration = parse_duration(ns.leader_election_lease_duration)
    renew_deadline = parse_duration(ns.leader_election_renew_deadline)
    retry_period = parse_duration(ns.leader_election_retry_period)
    if not lease_duration > renew_deadline > 1.2 * retry_period:
        raise ConfigError(
            "leader election needs lease duration > renew deadline > 1.2 x retry period"
        )
    log_format = ns.log_format.lower()
    if log_format not in ("json", "text"):
        raise ConfigError(f"--log-format: want json or text, got {ns.log_format!r}")
    try:
        qps = float(ns.kube_api_qps)
    except ValueError:
        raise ConfigError(f"--kube-api-qps: {ns.kube_api_qps!r} is not a number") from None
    if qps <= 0:
        raise ConfigError("--kube-api-qps must be > 0")
    return Settings(
        kubeconfig=ns.kubeconfig or None,
        driver_namespace=driver_namespace,
        additional_namespaces=_split_list(ns.additional_namespaces),
        image_name=ns.image_name,
        image_pull_secret_names=_split_list(ns.cd_daemon_image_pull_secret_names),
        daemon_log_verbosity=_int(ns.log_verbosity_cd_daemon, "--log-verbosity-cd-daemon", 0),
        max_nodes_per_imex_domain=_int(
            ns.max_nodes_per_imex_domain, "--max-nodes-per-imex-domain", 1
        ),
        feature_gates=parse_feature_gates(ns.feature_gates),
        daemon_priority_class_name=ns.cd_daemon_priority_class_name or None,
        pod_name=ns.pod_name or socket.gethostname(),
        leader_election=_bool(ns.leader_election_enabled),
        lease_name=ns.leader_election_lease_lock_name,
        lease_namespace=ns.leader_election_lease_lock_namespace or driver_namespace,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
        kube_api_qps=qps,
        kube_api_burst=_int(ns.kube_api_burst, "--kube-api-burst", 1),
        metrics_address=_bind(ns.http_endpoint),
        metrics_path=ns.metrics_path,
        probe_address=_bind(ns.probe_address),
        log_verbosity=_int(str(ns.log_verbosity), "--log-verbosity", 0),
        log_format=log_format,
        workers=_int(ns.workers, "--workers", 1),
        reconcile_timeout=parse_duration(ns.reconcile_timeout),
        orphan_sweep_interval=parse_duration(ns.orphan_sweep_interval),
        orphan_grace_period=parse_duration(ns.orphan_grace_period),
        daemon_pod_wait_timeout=parse_duration(ns.daemon_pod_wait_timeout),
    )


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Settings from flags and environment; raises ConfigError with a clear message."""
    return settings_from_namespace(build_parser(environ).parse_args(argv))
