"""Typed settings for the controller, read from flags with environment-variable fallbacks.

Every setting is one row of ``SETTINGS``: flag, environment variable, default, parser, an
optional check (a range or any validator), help, and where the value goes in ``Settings``.
Where NVIDIA's controller has an environment variable, the name is the same, so our Deployment
can be swapped into an existing NVIDIA DRA driver install unchanged.

Adding a setting is one row, plus the field it fills (``Settings``, or ``DaemonSettings`` /
``ReconcilerSettings`` for what the reconciler gets). Bounding one is one ``check=`` argument.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from computedomain import distribution_version
from computedomain.api import constants as c
from computedomain.domain.settings import DaemonSettings, ReconcilerSettings

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class ConfigError(ValueError):
    """A flag or environment variable holds a value that cannot work."""


# ---- parsers: (text, flag) -> value; they raise ConfigError ------------------------------------


def _where(flag: str) -> str:
    """The prefix that names the setting a bad value came from (nothing outside the table)."""
    return f"{flag}: " if flag else ""


def parse_duration(text: str, flag: str = "") -> float:
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
        raise ConfigError(f"{_where(flag)}invalid duration {text!r} (use e.g. 15s, 1m30s, 250ms)")
    return total


def parse_feature_gates(text: str, flag: str = "") -> dict[str, bool]:
    """Known gates with defaults, overridden by "Name=true,Other=false," (trailing comma ok)."""
    gates = dict(c.DEFAULT_FEATURE_GATES)
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or value.lower() not in ("true", "false"):
            raise ConfigError(
                f"{_where(flag)}invalid feature gate {item!r} (want Name=true or Name=false)"
            )
        if name in c.NVIDIA_OTHER_FEATURE_GATES:
            continue
        if name not in c.DEFAULT_FEATURE_GATES:
            known = ", ".join(sorted(c.DEFAULT_FEATURE_GATES))
            raise ConfigError(f"{_where(flag)}unknown feature gate {name!r} (known: {known})")
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


def _bind(text: str, flag: str) -> str | None:
    """A validated "[host]:port" string, or None when empty (endpoint disabled)."""
    if not text:
        return None
    try:
        parse_bind_address(text)
    except ConfigError as err:
        raise ConfigError(f"{_where(flag)}{err}") from None
    return text if ":" in text else f":{text}"


def _list(text: str, flag: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _bool(text: str, flag: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"{_where(flag)}invalid boolean {text!r}")


def _int(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{flag}: {text!r} is not an integer") from None


def _float(text: str, flag: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{flag}: {text!r} is not a number") from None


def _text(text: str, flag: str) -> str:
    return text


def _optional(text: str, flag: str) -> str | None:
    return text or None


def _or(default: Callable[[], str]) -> Callable[[str, str], str]:
    def parse(text: str, flag: str) -> str:
        return text or default()

    return parse


def _one_of(*choices: str) -> Callable[[str, str], str]:
    def parse(text: str, flag: str) -> str:
        if text.lower() not in choices:
            raise ConfigError(f"{flag}: want {' or '.join(choices)}, got {text!r}")
        return text.lower()

    return parse


_QUANTITY = re.compile(
    r"^\+?(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$"
)
_QUANTITY_SCALE = {
    "": Decimal(1),
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{s: Decimal(10) ** e for s, e in (("n", -9), ("u", -6), ("m", -3), ("k", 3), ("M", 6),
                                        ("G", 9), ("T", 12), ("P", 15), ("E", 18))},
}  # fmt: skip
_RESOURCES_EXAMPLE = (
    '{"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}}'
)


def quantity(text: str) -> Decimal:
    """The value of a Kubernetes resource quantity ("100m", "1", "256Mi", "1e3")."""
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(text)
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return number * Decimal(10) ** int(suffix[1:])
    return number * _QUANTITY_SCALE[suffix]


def _resource_requirements(env: str) -> Callable[[str, str], dict[str, dict[str, str]] | None]:
    """A parser of NVIDIA's ``CD_DAEMON_RESOURCES_JSON``: a JSON-encoded corev1
    ResourceRequirements with ``requests`` and/or ``limits`` (``claims`` is the controller's).
    Quantities may be JSON strings or numbers (Helm's ``toJson`` writes ``cpu: 1`` as 1)."""

    def parse(text: str, flag: str) -> dict[str, dict[str, str]] | None:
        where = f"{flag} / {env}"
        if not text.strip():
            return None
        try:
            value = json.loads(text)
        except ValueError as err:
            raise ConfigError(
                f"{where}: not valid JSON ({err}); want e.g. {_RESOURCES_EXAMPLE}"
            ) from None
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: want a JSON object such as {_RESOURCES_EXAMPLE}")
        unknown = sorted(set(value) - {"requests", "limits"})
        if unknown:
            raise ConfigError(
                f"{where}: unknown key {unknown[0]!r} (want requests and/or limits; the "
                "daemon's claims are set by the controller)"
            )
        result: dict[str, dict[str, str]] = {}
        amounts: dict[tuple[str, str], Decimal] = {}
        for kind in ("requests", "limits"):
            section = value.get(kind)
            if section is None:
                continue
            if not isinstance(section, dict):
                raise ConfigError(f"{where}: {kind} must be an object of resource: quantity")
            for resource, raw in section.items():
                if not resource or any(ch.isspace() for ch in resource):
                    raise ConfigError(f"{where}: {kind}: {resource!r} is not a resource name")
                number = isinstance(raw, (int, float)) and not isinstance(raw, bool)
                amount = str(raw) if number or isinstance(raw, str) else ""
                try:
                    amounts[(kind, resource)] = quantity(amount)
                except (ValueError, InvalidOperation):
                    raise ConfigError(
                        f"{where}: {kind}.{resource}: {raw!r} is not a Kubernetes quantity "
                        "(e.g. 100m, 1, 256Mi)"
                    ) from None
                result.setdefault(kind, {})[resource] = amount
        for (kind, resource), value_of in amounts.items():
            limit = amounts.get(("limits", resource))
            if kind == "requests" and limit is not None and value_of > limit:
                raise ConfigError(
                    f"{where}: requests.{resource} {result['requests'][resource]} exceeds "
                    f"limits.{resource} {result['limits'][resource]}"
                )
        return result or None

    return parse


def _imex_mode(text: str, flag: str) -> str:
    """NVIDIA's ``imex.mode``, spelled and refused exactly as upstream (contract §18)."""
    if text not in c.IMEX_MODES:
        raise ConfigError(f'unknown imex.mode "{text}"')
    return text


def _imex_isolation(text: str, flag: str) -> str:
    """NVIDIA's ``imex.isolation``: only ``domain`` works, upstream and here (contract §18)."""
    if text == c.IMEX_ISOLATION_CHANNEL:
        raise ConfigError(
            "not supported yet: per-workload IMEX channel allocation is not implemented"
        )
    if text != c.IMEX_ISOLATION_DOMAIN:
        raise ConfigError(f'unknown imex.isolation "{text}": must be "domain" or "channel"')
    return text


# ---- checks (ranges, validators): (value, row) -> None; they raise ConfigError ------------------


@dataclass(frozen=True)
class Check:
    """A validator plus the words that say what it accepts (shown in --help and the docs)."""

    accepts: str
    test: Callable[[Any, Setting], None]

    def __call__(self, value: Any, row: Setting) -> None:
        self.test(value, row)


def _number(value: float) -> str:
    return f"{value:g}"


def at_least(minimum: float, maximum: float | None = None) -> Check:
    def check(value: Any, row: Setting) -> None:
        if value < minimum or (maximum is not None and value > maximum):
            raise ConfigError(f"{row.flag} / {row.env}: must be {accepts}, got {value}")

    accepts = (
        f">= {_number(minimum)}"
        if maximum is None
        else (f"{_number(minimum)} to {_number(maximum)}")
    )
    return Check(accepts, check)


def above(bound: float) -> Check:
    def check(value: Any, row: Setting) -> None:
        if not value > bound:
            raise ConfigError(f"{row.flag} / {row.env}: must be > {_number(bound)}, got {value}")

    return Check(f"> {_number(bound)}", check)


def seconds_at_least(minimum: float, maximum: float | None = None) -> Check:
    def check(value: Any, row: Setting) -> None:
        if value < minimum:
            raise ConfigError(
                f"{row.flag} / {row.env}: must be at least {_number(minimum)}s, got {value:g}s"
            )
        if maximum is not None and value > maximum:
            raise ConfigError(
                f"{row.flag} / {row.env}: must be at most {_number(maximum)}s, got {value:g}s"
            )

    if maximum is None:
        return Check(f"duration >= {_number(minimum)}s", check)
    return Check(f"duration {_number(minimum)}s to {_number(maximum)}s", check)


def required(what: str) -> Check:
    def check(value: Any, row: Setting) -> None:
        if not value:
            raise ConfigError(f"{row.flag} / {row.env} must not be empty ({what})")
        if any(ch.isspace() for ch in str(value)):
            raise ConfigError(f"{row.flag} / {row.env}: {value!r} contains white space")

    return Check(f"non-empty ({what})", check)


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _valid_names(kind: str, *, label: bool, optional: bool = False) -> Check:
    """Each name (one, a tuple of them, or None when optional) is a DNS-1123 label/subdomain."""
    pattern = _DNS_LABEL if label else _DNS_SUBDOMAIN
    rule = "DNS-1123 label" if label else "DNS-1123 subdomain"

    def check(value: Any, row: Setting) -> None:
        names = value if isinstance(value, tuple) else (() if value is None else (value,))
        if not names and not optional and not isinstance(value, tuple):
            raise ConfigError(f"{row.flag} / {row.env} must not be empty")
        for name in names:
            if len(name) > (63 if label else 253) or not pattern.match(name):
                raise ConfigError(
                    f"{row.flag} / {row.env}: {name!r} is not a valid {kind} name ({rule}: "
                    f"lower-case letters, digits and '-'{'' if label else ' or .'}, starting and "
                    "ending alphanumeric)"
                )

    return Check(f"{kind} name ({rule})", check)


def validated_by_parser(accepts: str) -> Check:
    """Names what a setting accepts when its parser already refuses everything else."""
    return Check(accepts, lambda value, row: None)


def _path(value: Any, row: Setting) -> None:
    if not str(value).startswith("/"):
        raise ConfigError(f"{row.flag} / {row.env}: {value!r} must start with '/'")


def _kubeconfig(value: Any, row: Setting) -> None:
    if value is not None and not os.path.isfile(value):
        raise ConfigError(f"{row.flag} / {row.env}: {value} is not a file")


# ---- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    flag: str
    env: str
    default: str | None
    parse: Callable[[str, str], Any]
    help: str
    # Where the value goes: a ``Settings`` field, ``reconciler.<field>`` or ``daemon.<field>``.
    dest: str
    check: Check | None = None

    def value(self, text: str | None) -> Any:
        parsed = self.parse(text or "", self.flag)
        if self.check is not None:
            self.check(parsed, self)
        return parsed

    @property
    def option(self) -> str:
        """The argparse destination (the flag without dashes)."""
        return self.flag.lstrip("-").replace("-", "_")


_GATES_HELP = (
    "Name=bool pairs, comma-separated: "
    + ", ".join(f"{k} (default {str(v).lower()})" for k, v in c.DEFAULT_FEATURE_GATES.items())
    + "; NVIDIA's other gates ("
    + ", ".join(sorted(c.NVIDIA_OTHER_FEATURE_GATES))
    + ") are accepted and ignored, so NVIDIA's chart values carry over"
)

# fmt: off
SETTINGS: Sequence[Setting] = (
    Setting("--kubeconfig", "KUBECONFIG", None, _optional,
            "kubeconfig file; empty: the pod's in-cluster credentials, or ~/.kube/config outside "
            "a cluster", "kubeconfig", check=Check("an existing file, or empty", _kubeconfig)),
    Setting("--namespace", "NAMESPACE", "default", _or(lambda: "default"),
            "driver namespace: where the IMEX DaemonSets, daemon RCTs and cliques live",
            "daemon.driver_namespace", check=_valid_names("namespace", label=True)),
    Setting("--additional-namespaces", "ADDITIONAL_NAMESPACES", "", _list,
            "comma-separated extra namespaces searched for DaemonSets, pods and cliques "
            "(after moving the driver to another namespace)", "reconciler.additional_namespaces",
            check=_valid_names("namespace", label=True)),
    Setting("--image-name", "IMAGE_NAME", c.NVIDIA_DRIVER_IMAGE, _text,
            "image of the IMEX daemon pods; must be NVIDIA's DRA driver image of the release the "
            "kubelet plugin runs (NVIDIA's chart passes its own image here)", "daemon.image",
            check=required("NVIDIA's DRA driver image")),
    Setting("--cd-daemon-image-pull-secret-names", "CD_DAEMON_IMAGE_PULL_SECRET_NAMES", "", _list,
            "comma-separated image pull secrets copied into the daemon pod spec",
            "daemon.image_pull_secrets", check=_valid_names("Secret", label=False)),
    Setting("--log-verbosity-cd-daemon", "LOG_VERBOSITY_CD_DAEMON", "4", _int,
            "log verbosity passed to the IMEX daemons as LOG_VERBOSITY", "daemon.log_verbosity",
            check=at_least(0, 10)),
    Setting("--max-nodes-per-imex-domain", "MAX_NODES_PER_IMEX_DOMAIN",
            str(c.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN), _int,
            "IMEX slots per clique passed to the daemons (18 on GB200/GB300 NVL72)",
            "daemon.max_nodes_per_imex_domain", check=at_least(1, 2048)),
    Setting("--feature-gates", "FEATURE_GATES", "", parse_feature_gates, _GATES_HELP,
            "daemon.feature_gates"),
    Setting("--imex-mode", "IMEX_MODE", c.IMEX_MODE_DRIVER, _imex_mode,
            f"who runs IMEX: {c.IMEX_MODE_DRIVER} (this controller creates a DaemonSet of IMEX "
            f"daemons per ComputeDomain) or {c.IMEX_MODE_HOST} (each node's own nvidia-imex "
            "service; per ComputeDomain only the workload claim template is created, with "
            f"allocationMode Single; needs the {c.GATE_HOST_MANAGED_IMEX} feature gate and "
            f"forces {c.GATE_DNS_NAMES} and {c.GATE_CLIQUES} off)", "reconciler.imex_mode",
            check=validated_by_parser(f"{c.IMEX_MODE_DRIVER} or {c.IMEX_MODE_HOST}")),
    Setting("--imex-isolation", "IMEX_ISOLATION", c.IMEX_ISOLATION_DOMAIN, _imex_isolation,
            f"IMEX channel isolation: {c.IMEX_ISOLATION_DOMAIN} (all workloads of a "
            f"ComputeDomain share channel 0); {c.IMEX_ISOLATION_CHANNEL} (a channel per "
            "workload) is refused, as upstream, until NVIDIA implements it", "imex_isolation",
            check=validated_by_parser(c.IMEX_ISOLATION_DOMAIN)),
    Setting("--cd-daemon-priority-class-name", "CD_DAEMON_PRIORITY_CLASS_NAME", "", _optional,
            "optional priorityClassName for the IMEX daemon pods (empty: none, as upstream)",
            "daemon.priority_class_name",
            check=_valid_names("PriorityClass", label=False, optional=True)),
    Setting("--cd-daemon-resources-json", "CD_DAEMON_RESOURCES_JSON", "",
            _resource_requirements("CD_DAEMON_RESOURCES_JSON"),
            "optional resources of the IMEX daemon container as JSON (NVIDIA's format): "
            "{\"requests\": {...}, \"limits\": {...}}; equal cpu and memory requests and limits "
            "(or limits alone) make the daemon pods Guaranteed QoS (empty: none, BestEffort, as "
            "upstream)", "daemon.daemon_resources",
            check=validated_by_parser("JSON {requests, limits} of quantities, requests <= limits")),
    Setting("--pod-name", "POD_NAME", None, _or(socket.gethostname),
            "this replica's pod name, the leader-election identity prefix (default: hostname)",
            "pod_name"),
    Setting("--leader-election-enabled", "LEADER_ELECTION_ENABLED", "true", _bool,
            "elect a leader through a Lease; only the leader writes (true/false)",
            "leader_election"),
    Setting("--leader-election-lease-lock-name", "LEADER_ELECTION_LEASE_LOCK_NAME",
            "nvidia-compute-domain-controller", _text, "name of the leader-election Lease",
            "lease_name", check=_valid_names("Lease", label=False)),
    Setting("--leader-election-lease-lock-namespace", "LEADER_ELECTION_LEASE_LOCK_NAMESPACE", "",
            _optional, "namespace of the Lease (default: the driver namespace)", "lease_namespace",
            check=_valid_names("namespace", label=True, optional=True)),
    Setting("--leader-election-lease-duration", "LEADER_ELECTION_LEASE_DURATION", "15s",
            parse_duration, "how long a standby waits on an unrenewed lease before taking over",
            "lease_duration", check=seconds_at_least(1)),
    Setting("--leader-election-renew-deadline", "LEADER_ELECTION_RENEW_DEADLINE", "10s",
            parse_duration,
            "how long the leader keeps retrying a renew before it gives up and exits",
            "renew_deadline", check=seconds_at_least(1)),
    Setting("--leader-election-retry-period", "LEADER_ELECTION_RETRY_PERIOD", "2s",
            parse_duration, "interval between lease acquire/renew attempts", "retry_period",
            check=seconds_at_least(0.1)),
    Setting("--kube-api-qps", "KUBE_API_QPS", "100", _float,
            "client-side rate limit for API requests per second (upstream default 5 throttles "
            "large domains; the apiserver's priority and fairness queues the rest, and 429 "
            "Retry-After is honoured)", "kube_api_qps", check=above(0)),
    Setting("--kube-api-burst", "KUBE_API_BURST", "200", _int,
            "client-side burst above --kube-api-qps", "kube_api_burst", check=at_least(1)),
    Setting("--http-endpoint", "HTTP_ENDPOINT", ":8080", _bind,
            "[host]:port serving Prometheus metrics; empty disables it", "metrics_address"),
    Setting("--metrics-path", "METRICS_PATH", "/metrics", _text,
            "HTTP path of the metrics endpoint", "metrics_path",
            check=Check("a path starting with '/'", _path)),
    Setting("--probe-address", "PROBE_ADDRESS", ":8081", _bind,
            "[host]:port serving /healthz and /readyz; empty disables it", "probe_address"),
    Setting("--log-verbosity", "LOG_VERBOSITY", "0", _int,
            "controller log verbosity: 0 state changes, 4 per-reconcile detail, 6 API chatter",
            "log_verbosity", check=at_least(0, 10)),
    Setting("--log-format", "LOG_FORMAT", "json", _one_of("json", "text"),
            "log format: json or text", "log_format"),
    Setting("--workers", "WORKERS", "8", _int,
            "concurrent reconciles (a ComputeDomain is never reconciled twice at once)",
            "workers", check=at_least(1, 256)),
    Setting("--reconcile-timeout", "RECONCILE_TIMEOUT", "60s", parse_duration,
            "deadline of one reconcile", "reconcile_timeout", check=seconds_at_least(1)),
    Setting("--orphan-sweep-interval", "ORPHAN_SWEEP_INTERVAL", "10m", parse_duration,
            "period of the full sweep for children and node labels whose ComputeDomain is gone",
            "orphan_sweep_interval", check=seconds_at_least(10)),
    Setting("--node-inventory-resync-interval", "NODE_INVENTORY_RESYNC_INTERVAL", "5m",
            parse_duration,
            "period of the paged metadata LIST of every Node that feeds the clique inventory "
            "(nodes and free nodes per clique); Nodes carrying the ComputeDomain label are "
            "watched and never wait for it, so only Nodes without it (new ones, their clique "
            "label set once at boot) reach the gauges up to one period late",
            "node_inventory_resync_interval", check=seconds_at_least(5, 3600)),
    Setting("--orphan-grace-period", "ORPHAN_GRACE_PERIOD", "5s", parse_duration,
            "how long an unknown ComputeDomain UID must stay unknown before its objects are "
            "removed", "reconciler.orphan_grace_period", check=seconds_at_least(1)),
    Setting("--daemon-pod-wait-timeout", "DAEMON_POD_WAIT_TIMEOUT", "60s", parse_duration,
            "on deletion, how long to wait for IMEX daemon pods to terminate before removing the "
            "finalizer anyway (with a Warning event)", "reconciler.daemon_pod_wait_timeout",
            check=seconds_at_least(1)),
    Setting("--daemon-ready-grace-period", "DAEMON_READY_GRACE_PERIOD", "2m", parse_duration,
            "how long an IMEX daemon may be not ready (starting: scheduling, image pull, IMEX "
            "start-up, ~30-60 s per #1152) before DaemonsReady says DaemonsNotReady and a Warning "
            "event is recorded; before that the reason is DaemonsStarting",
            "reconciler.daemon_ready_grace_period", check=seconds_at_least(0)),
    Setting("--status-coalesce-window", "STATUS_COALESCE_WINDOW", "1s", parse_duration,
            "a ComputeDomain's status change after a quiet period is written at once; further "
            "changes within this window are folded into one write at its end, and while they "
            "keep coming the window doubles after each such write, up to 4x this (a bring-up "
            "costs a few status writes per CD, not several per daemon; a Ready flip and "
            "deletion are never delayed; 0 writes every change at once)",
            "reconciler.status_coalesce_window", check=seconds_at_least(0, 60)),
)
# fmt: on


@dataclass(frozen=True)
class Settings:
    """Everything the controller process needs; built by `parse_settings`."""

    reconciler: ReconcilerSettings
    kubeconfig: str | None
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
    node_inventory_resync_interval: float = 300.0
    imex_isolation: str = c.IMEX_ISOLATION_DOMAIN

    @property
    def daemon(self) -> DaemonSettings:
        return self.reconciler.daemon

    @property
    def driver_namespace(self) -> str:
        return self.reconciler.driver_namespace

    @property
    def managed_namespaces(self) -> tuple[str, ...]:
        return self.reconciler.managed_namespaces

    @property
    def cliques_enabled(self) -> bool:
        return self.reconciler.cliques_enabled


def settings_markdown() -> str:
    """Every setting as a Markdown table (docs/operations.md carries it; a test keeps it true)."""
    rows = ["| Flag | Environment | Default | Accepts | Meaning |", "|---|---|---|---|---|"]
    for row in SETTINGS:
        default = f"`{row.default}`" if row.default else "(empty)"
        accepts = row.check.accepts if row.check else "any"
        meaning = row.help.replace("|", "\\|")
        rows.append(f"| `{row.flag}` | `{row.env}` | {default} | {accepts} | {meaning} |")
    return "\n".join(rows) + "\n"


def environ(**values: str) -> dict[str, str]:
    """The environment that sets these settings, by option name (``namespace="x"`` gives
    ``{"NAMESPACE": "x"}``), for whoever starts a controller."""
    by_option = {row.option: row.env for row in SETTINGS}
    unknown = sorted(set(values) - by_option.keys())
    if unknown:
        raise KeyError(f"no such settings: {', '.join(unknown)}")
    return {by_option[option]: value for option, value in values.items()}


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
    for row in SETTINGS:
        parser.add_argument(
            row.flag,
            dest=row.option,
            default=env.get(row.env, row.default),
            help=f"{row.help} [{row.env}{'; ' + row.check.accepts if row.check else ''}]",
        )
    parser.add_argument(
        "-v",
        dest="log_verbosity",
        help="shorthand for --log-verbosity [LOG_VERBOSITY]",
        default=argparse.SUPPRESS,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {distribution_version()}")
    return parser


def settings_from_namespace(ns: argparse.Namespace) -> Settings:
    values: dict[str, dict[str, Any]] = {"": {}, "reconciler": {}, "daemon": {}}
    for row in SETTINGS:
        raw = getattr(ns, row.option)
        group, _, field = row.dest.rpartition(".")
        values[group][field] = row.value(None if raw is None else str(raw))
    top = values[""]
    if not top["lease_duration"] > top["renew_deadline"] > 1.2 * top["retry_period"]:
        raise ConfigError(
            "leader election needs lease duration > renew deadline > 1.2 x retry period"
        )
    if values["reconciler"]["imex_mode"] == c.IMEX_MODE_HOST:
        gates = values["daemon"]["feature_gates"]
        if not gates[c.GATE_HOST_MANAGED_IMEX]:
            raise ConfigError(
                f'imex.mode="{c.IMEX_MODE_HOST}" requires the {c.GATE_HOST_MANAGED_IMEX} '
                "feature gate to be enabled"
            )
        # As upstream: no daemons, so neither DNS names nor cliques exist in this mode.
        values["daemon"]["feature_gates"] = {
            **gates,
            c.GATE_DNS_NAMES: False,
            c.GATE_CLIQUES: False,
        }
    reconciler = ReconcilerSettings(
        daemon=DaemonSettings(**values["daemon"]), **values["reconciler"]
    )
    top["lease_namespace"] = top["lease_namespace"] or reconciler.driver_namespace
    return Settings(reconciler=reconciler, **top)


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Settings from flags and environment; raises ConfigError with a clear message."""
    return settings_from_namespace(build_parser(environ).parse_args(argv))
