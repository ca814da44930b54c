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
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from computedomain import distribution_version
from computedomain.api import constants as c
from computedomain.domain.placement import PLACEMENT_OPT_IN, RECORDED_CLIQUE_ANNOTATION
from computedomain.domain.selectors import SelectorError, matches, parse_selector
from computedomain.domain.settings import DaemonSettings, ReconcilerSettings
from computedomain.runtime.featuregates import FeatureGateError, parse_gates

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


def feature_gate_values(text: str, flag: str = "") -> dict[str, bool]:
    """Every gate "Name=true,Other=false," names (trailing comma ok), NVIDIA's included; refuses,
    as NVIDIA's binary does, a malformed pair or a name no NVIDIA component knows."""
    try:
        given = parse_gates(text)
    except FeatureGateError as err:
        raise ConfigError(f"{_where(flag)}{err}") from None
    for name in given:
        if name not in c.KNOWN_FEATURE_GATES:
            known = ", ".join(sorted(c.KNOWN_FEATURE_GATES))
            raise ConfigError(f"{_where(flag)}unrecognized feature gate: {name} (known: {known})")
    return given


def parse_feature_gates(text: str, flag: str = "") -> dict[str, bool]:
    """Our gates with their defaults, as "Name=true,Other=false," sets them; NVIDIA's other
    gates are accepted and ignored (``ignored_feature_gates``), except that ``AllAlpha`` and
    ``AllBeta`` set every gate of theirs the string leaves unnamed, as in NVIDIA's binary."""
    given = feature_gate_values(text, flag)
    gates = dict(c.DEFAULT_FEATURE_GATES)
    for toggle, stage in ((c.GATE_ALL_ALPHA, c.ALPHA_FEATURE_GATES),
                          (c.GATE_ALL_BETA, c.BETA_FEATURE_GATES)):  # fmt: skip
        if toggle in given:
            gates.update({name: given[toggle] for name in stage})
    gates.update({name: value for name, value in given.items() if name in gates})
    if gates[c.GATE_CLIQUES] and not gates[c.GATE_DNS_NAMES]:
        # NVIDIA's words; its daemons refuse to start as well.
        raise ConfigError(
            f"feature gate {c.GATE_CLIQUES} requires {c.GATE_DNS_NAMES} to also be enabled"
        )
    return gates


def ignored_feature_gates(text: str) -> dict[str, bool]:
    """The gates a valid FEATURE_GATES names that concern NVIDIA's kubelet plugin or klog, not
    this controller (``AllAlpha``/``AllBeta`` are not among them: they set ours)."""
    return {
        name: value
        for name, value in feature_gate_values(text).items()
        if name in c.NVIDIA_OTHER_FEATURE_GATES and name not in (c.GATE_ALL_ALPHA, c.GATE_ALL_BETA)
    }


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


def _pod_selectors(text: str, flag: str) -> tuple[str, ...]:
    """Label selectors separated by ';' (a selector's own terms are separated by ','), none of
    which may match our own controller pods; empty: no detection."""
    selectors: list[str] = []
    for selector in filter(None, (part.strip() for part in text.split(";"))):
        try:
            parsed = parse_selector(selector)
        except SelectorError as err:
            raise ConfigError(f"{flag}: {err}") from None
        if matches(parsed, c.OWN_POD_TEMPLATE_LABELS):
            raise ConfigError(f"{flag}: {selector!r} matches this controller's own pods")
        selectors.append(",".join(term.strip() for term in selector.split(",")))
    return tuple(selectors)


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


def no_white_space(what: str) -> Check:
    def check(value: Any, row: Setting) -> None:
        if any(ch.isspace() for ch in str(value)):
            raise ConfigError(f"{row.flag} / {row.env}: {value!r} contains white space")

    return Check(f"{what} without white space, or empty", check)


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


def _cert_dir(value: Any, row: Setting) -> None:
    if value is None:
        return
    missing = [f for f in ("tls.crt", "tls.key") if not os.path.isfile(os.path.join(value, f))]
    if missing:
        raise ConfigError(f"{row.flag} / {row.env}: {value} has no {' or '.join(missing)}")


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
    # NVIDIA's other spellings of the same setting: flags (e.g. klog's ``-v``) and environment
    # variables read when ``env`` is unset (e.g. ``V``, ``LOGGING_FORMAT``).
    aliases: tuple[str, ...] = ()
    fallback_env: tuple[str, ...] = ()
    # Go's StringSlice: the flag may be given more than once; the values join with commas.
    repeatable: bool = False

    def value(self, text: str | None) -> Any:
        parsed = self.parse(text or "", self.flag)
        if self.check is not None:
            self.check(parsed, self)
        return parsed

    @property
    def option(self) -> str:
        """The argparse destination (the flag without dashes)."""
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def flags(self) -> tuple[str, ...]:
        return (self.flag, *self.aliases)

    def from_env(self, env: Mapping[str, str]) -> str | None:
        for name in (self.env, *self.fallback_env):
            if name in env:
                return env[name]
        return self.default


@dataclass(frozen=True)
class InertFlag:
    """A flag of NVIDIA's compute-domain-controller that has no counterpart here: accepted (its
    value checked as NVIDIA checks it) so NVIDIA's Deployment runs unchanged, and logged once
    at start when set."""

    flag: str
    env: str
    parse: Callable[[str, str], Any]
    accepts: str
    help: str
    boolean: bool = False

    @property
    def option(self) -> str:
        return "nvidia_" + self.flag.lstrip("-").replace("-", "_")


_GATES_HELP = (
    "Name=bool pairs, comma-separated (values as Go reads them: true/false, 1/0, t/f): "
    + ", ".join(f"{k} (default {str(v).lower()})" for k, v in c.DEFAULT_FEATURE_GATES.items())
    + "; AllAlpha / AllBeta set those of that stage not named ("
    + ", ".join(sorted(c.ALPHA_FEATURE_GATES))
    + " / "
    + ", ".join(sorted(c.BETA_FEATURE_GATES))
    + "); NVIDIA's other gates of v0.4.x ("
    + ", ".join(sorted(c.NVIDIA_V04_OTHER_FEATURE_GATES - {c.GATE_ALL_ALPHA, c.GATE_ALL_BETA}))
    + ") and of its main branch ("
    + ", ".join(sorted(c.NVIDIA_MAIN_OTHER_FEATURE_GATES))
    + ") concern its kubelet plugin or logging: accepted, logged once and ignored, so NVIDIA's "
    "chart values carry over; any other name is refused"
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
            "(after moving the driver to another namespace); the flag may be repeated",
            "reconciler.additional_namespaces", check=_valid_names("namespace", label=True),
            repeatable=True),
    Setting("--image-name", "IMAGE_NAME", "", _text,
            "image of the IMEX daemon pods; must be NVIDIA's DRA driver image of the release the "
            "kubelet plugin runs. Empty (the default): the image NVIDIA's kubelet plugin "
            "DaemonSet in the driver namespace runs, read when each daemon DaemonSet is "
            f"created ({c.NVIDIA_DRIVER_IMAGE} while no plugin is found); a value given here "
            "wins, and a plugin running another image is then reported (DaemonImageDrift)",
            "daemon.image", check=no_white_space("an image reference")),
    Setting("--cd-daemon-image-pull-secret-names", "CD_DAEMON_IMAGE_PULL_SECRET_NAMES", "", _list,
            "comma-separated image pull secrets copied into the daemon pod spec",
            "daemon.image_pull_secrets", check=_valid_names("Secret", label=False)),
    Setting("--log-verbosity-cd-daemon", "LOG_VERBOSITY_CD_DAEMON", "4", _int,
            "log verbosity passed to the IMEX daemons as LOG_VERBOSITY", "daemon.log_verbosity",
            check=at_least(0)),
    Setting("--max-nodes-per-imex-domain", "MAX_NODES_PER_IMEX_DOMAIN",
            str(c.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN), _int,
            "IMEX slots per clique passed to the daemons (18 on GB200/GB300 NVL72)",
            "daemon.max_nodes_per_imex_domain", check=at_least(1, 2048)),
    Setting("--feature-gates", "FEATURE_GATES", "", parse_feature_gates, _GATES_HELP,
            "daemon.feature_gates",
            check=validated_by_parser("Name=bool,... of gates NVIDIA's components know")),
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
    Setting("--nvidia-controller-selectors", "NVIDIA_CONTROLLER_SELECTORS",
            ";".join(c.NVIDIA_CONTROLLER_SELECTORS), _pod_selectors,
            "label selectors of NVIDIA's controller pods in the driver namespace, separated by "
            "';' (k=v, k!=v, k, !k; ',' within one selector means and): while one runs, this "
            "controller stands by, writing nothing to ComputeDomains until it is gone (Warning "
            "events, gauge, alert). The default finds the pods of NVIDIA's chart "
            "v0.4.0, v0.4.1 and v0.5, fresh (dra-driver-nvidia-gpu-component) "
            "or upgraded with nameOverride=nvidia-dra-driver-gpu; with another nameOverride add "
            "<nameOverride>-component=controller; empty: no detection and no stand-by",
            "nvidia_controller_selectors",
            check=validated_by_parser("label selectors separated by ';', none matching our pods")),
    Setting("--http-endpoint", "HTTP_ENDPOINT", ":8080", _bind,
            "[host]:port serving Prometheus metrics; empty disables it", "metrics_address"),
    Setting("--metrics-path", "METRICS_PATH", "/metrics", _text,
            "HTTP path of the metrics endpoint", "metrics_path",
            check=Check("a path starting with '/'", _path)),
    Setting("--probe-address", "PROBE_ADDRESS", ":8081", _bind,
            "[host]:port serving /healthz and /readyz; empty disables it", "probe_address"),
    Setting("--log-verbosity", "LOG_VERBOSITY", "0", _int,
            "controller log verbosity (klog's -v; NVIDIA's Deployment passes -v "
            "$(LOG_VERBOSITY)): 0 state changes, 4 per-reconcile detail, 6 API chatter, more "
            "adds nothing", "log_verbosity", check=at_least(0), aliases=("-v", "--v"),
            fallback_env=("V",)),
    Setting("--log-format", "LOG_FORMAT", "json", _one_of("json", "text"),
            "log format: json or text (NVIDIA's --logging-format / LOGGING_FORMAT is the same "
            "setting)", "log_format", check=validated_by_parser("json or text"),
            aliases=("--logging-format",), fallback_env=("LOGGING_FORMAT",)),
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
            "period of the paged LIST of every Node (as a Table: metadata and the printed "
            "Ready/SchedulingDisabled status, not the whole Node) that feeds the clique "
            "inventory (computedomain_clique_nodes: total, ready, held, free per clique); Nodes "
            "carrying the ComputeDomain label are watched and never wait for it, so only Nodes "
            "without it (new ones, a readiness or cordon change of a free one) reach the gauges "
            "up to one period late",
            "node_inventory_resync_interval", check=seconds_at_least(5, 3600)),
    Setting("--orphan-grace-period", "ORPHAN_GRACE_PERIOD", "5s", parse_duration,
            "how long an unknown ComputeDomain UID must stay unknown before its objects are "
            "removed", "reconciler.orphan_grace_period", check=seconds_at_least(1)),
    Setting("--daemon-pod-wait-timeout", "DAEMON_POD_WAIT_TIMEOUT", "60s", parse_duration,
            "on deletion, how long to wait for IMEX daemon pods to terminate before removing the "
            "finalizer anyway (with a Warning event)", "reconciler.daemon_pod_wait_timeout",
            check=seconds_at_least(1)),
    Setting("--workload-release-timeout", "WORKLOAD_RELEASE_TIMEOUT", "5m", parse_duration,
            "on deletion, how long a ComputeDomain keeps its IMEX daemons (and children and node "
            "labels) while workload pods still use its channel ResourceClaimTemplate (Running, "
            "also while being deleted, or Pending on their node with a container running), "
            "so a job that drains is not cut off from IMEX (CUDA error 719); past it, or when "
            "no such pod is left, the deletion goes on (a Warning names the pods still running "
            "then). 0: no wait, as NVIDIA's controller", "reconciler.workload_release_timeout",
            check=seconds_at_least(0)),
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
            "deletion are never delayed, nor a clique entry; a daemon pod seen before its "
            "entry waits at most one window for it; 0 writes every change at once)",
            "reconciler.status_coalesce_window", check=seconds_at_least(0, 60)),
    Setting("--workload-start-grace-period", "WORKLOAD_START_GRACE_PERIOD", "5m", parse_duration,
            "how long a ComputeDomain may wait for its workload (no IMEX daemon yet), and a pod "
            "using its channel ResourceClaimTemplate stay Pending, before the controller lists "
            "the Pending pods of the ComputeDomain's namespace and Ready says "
            "WorkloadPodsNotStarting with the first such pod and its own words (unschedulable, "
            "image pull back-off, stuck in ContainerCreating); no workload pod is watched",
            "reconciler.workload_start_grace_period", check=seconds_at_least(1)),
    Setting("--workload-pod-check-interval", "WORKLOAD_POD_CHECK_INTERVAL", "1m", parse_duration,
            "the shortest time between two LISTs of the Pending pods for one ComputeDomain that "
            "waits for its workload past WORKLOAD_START_GRACE_PERIOD; while a LIST finds none of "
            "its pods the next waits twice as long, up to 8 times this",
            "reconciler.workload_pod_check_interval", check=seconds_at_least(1)),
    Setting("--placement-webhook-address", "PLACEMENT_WEBHOOK_ADDRESS", "", _bind,
            "[host]:port of the placement webhook (HTTPS): a mutating admission webhook that "
            "gives each pod using an opted-in ComputeDomain's channel ResourceClaimTemplate a "
            f"required node affinity to one NVLink clique, decided once per ComputeDomain (the "
            f"clique it uses, else the one with the most free nodes that fits spec.numNodes) "
            f"and recorded in its {RECORDED_CLIQUE_ANNOTATION} annotation; opt-in by the label "
            f"{PLACEMENT_OPT_IN}=true on the namespace or the annotation on the ComputeDomain. "
            "Empty (the default): no webhook", "placement_webhook_address"),
    Setting("--placement-webhook-cert-dir", "PLACEMENT_WEBHOOK_CERT_DIR", "", _optional,
            "directory holding the webhook's tls.crt and tls.key (a cert-manager Secret "
            "mounted; cert-manager's CA injector writes the caBundle). Empty: the controller "
            "makes a CA and a serving certificate, keeps them in the Secret "
            "--placement-webhook-secret, and writes the CA into the caBundle of "
            "--placement-webhook-configuration", "placement_webhook_cert_dir",
            check=Check("a directory with tls.crt and tls.key, or empty", _cert_dir)),
    Setting("--placement-webhook-secret", "PLACEMENT_WEBHOOK_SECRET",
            "computedomain-placement-webhook-tls", _text,
            "Secret in the driver namespace holding the certificate the controller makes "
            "(shared by the replicas)", "placement_webhook_secret",
            check=_valid_names("Secret", label=False)),
    Setting("--placement-webhook-configuration", "PLACEMENT_WEBHOOK_CONFIGURATION",
            "computedomain-placement", _text,
            "MutatingWebhookConfiguration whose webhooks' caBundle the controller writes "
            "(checked again every minute: an upgrade that resets it gets it back)",
            "placement_webhook_configuration", check=_valid_names("configuration", label=False)),
    Setting("--placement-webhook-hosts", "PLACEMENT_WEBHOOK_HOSTS", "", _list,
            "comma-separated DNS names and IP addresses the certificate the controller makes "
            "is valid for; empty: computedomain-placement-webhook.<driver namespace>.svc (the "
            "chart's Service)", "placement_webhook_hosts"),
)
# fmt: on


_VMODULE_ITEM = re.compile(r"^[^=,]+=\d+$")


def _vmodule(text: str, flag: str) -> str:
    for item in filter(None, text.split(",")):
        if not _VMODULE_ITEM.match(item):
            raise ConfigError(f"{flag}: {item!r} does not have the pattern=N format")
    return text


def _size(text: str, flag: str) -> str:
    try:
        quantity(text.strip())
    except (ValueError, InvalidOperation):
        raise ConfigError(f"{flag}: {text!r} is not a size (e.g. 512, 1K, 2Ki, 3M)") from None
    return text


_KLOG_ONE_STREAM = "this controller writes every log line at once to one stream (stderr)"

# NVIDIA's v0.4.x compute-domain-controller flags (its main.go and pkg/flags: urfave/cli over
# component-base's logging options) that have nothing to set here. Every other flag of NVIDIA's
# binary is a row of SETTINGS (same flag, same environment variable) or an alias of one.
# fmt: off
INERT_FLAGS: Sequence[InertFlag] = (
    InertFlag("--pprof-path", "PPROF_PATH", _text, "any",
              "NVIDIA's HTTP path for Go's pprof profiles on --http-endpoint; a Python process "
              "has none to serve, so it is ignored (NVIDIA's chart sets it empty)"),
    InertFlag("--vmodule", "VMODULE", _vmodule, "pattern=N,...",
              "klog's per-source-file verbosity; ignored: --log-verbosity / -v applies to all"),
    InertFlag("--log-flush-frequency", "LOG_FLUSH_FREQUENCY", parse_duration, "duration",
              f"klog's longest time between log flushes; ignored: {_KLOG_ONE_STREAM}"),
    InertFlag("--log-json-info-buffer-size", "LOG_JSON_INFO_BUFFER_SIZE", _size, "size",
              f"[Alpha] klog's buffer for info lines in JSON format; ignored: {_KLOG_ONE_STREAM}"),
    InertFlag("--log-json-split-stream", "LOG_JSON_SPLIT_STREAM", _bool, "true or false",
              f"[Alpha] klog's info lines to stdout, errors to stderr (JSON); ignored: "
              f"{_KLOG_ONE_STREAM}", boolean=True),
    InertFlag("--log-text-info-buffer-size", "LOG_TEXT_INFO_BUFFER_SIZE", _size, "size",
              f"[Alpha] klog's buffer for info lines in text format; ignored: {_KLOG_ONE_STREAM}"),
    InertFlag("--log-text-split-stream", "LOG_TEXT_SPLIT_STREAM", _bool, "true or false",
              f"[Alpha] klog's info lines to stdout, errors to stderr (text); ignored: "
              f"{_KLOG_ONE_STREAM}", boolean=True),
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
    nvidia_controller_selectors: tuple[str, ...] = c.NVIDIA_CONTROLLER_SELECTORS
    placement_webhook_address: str | None = None
    placement_webhook_cert_dir: str | None = None
    placement_webhook_secret: str = "computedomain-placement-webhook-tls"  # noqa: S105 - a name
    placement_webhook_configuration: str = "computedomain-placement"
    placement_webhook_hosts: tuple[str, ...] = ()
    # What NVIDIA's command line set that has no effect here, one line each, logged at start.
    notices: tuple[str, ...] = ()

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
        flags = ", ".join(f"`{flag}`" for flag in row.flags)
        envs = " or ".join(f"`{env}`" for env in (row.env, *row.fallback_env))
        default = f"`{row.default}`" if row.default else "(empty)"
        accepts = row.check.accepts if row.check else "any"
        meaning = row.help.replace("|", "\\|")
        rows.append(f"| {flags} | {envs} | {default} | {accepts} | {meaning} |")
    return "\n".join(rows) + "\n"


def inert_flags_markdown() -> str:
    """NVIDIA's flags accepted without effect, as a Markdown table (docs/operations.md)."""
    rows = ["| Flag | Environment | Accepts | NVIDIA's meaning, and why it does nothing here |",
            "|---|---|---|---|"]  # fmt: skip
    for row in INERT_FLAGS:
        rows.append(f"| `{row.flag}` | `{row.env}` | {row.accepts} | {row.help} |")
    return "\n".join(rows) + "\n"


def environ(**values: str) -> dict[str, str]:
    """The environment that sets these settings, by option name (``namespace="x"`` gives
    ``{"NAMESPACE": "x"}``), for whoever starts a controller."""
    by_option = {row.option: row.env for row in SETTINGS}
    unknown = sorted(set(values) - by_option.keys())
    if unknown:
        raise KeyError(f"no such settings: {', '.join(unknown)}")
    return {by_option[option]: value for option, value in values.items()}


class _Repeated(argparse.Action):
    """Go's StringSlice flag: each use adds its values; flags replace the environment's."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        marker = f"_given_{self.dest}"
        before = getattr(namespace, self.dest) if getattr(namespace, marker, False) else ""
        setattr(namespace, self.dest, ",".join(filter(None, (before, str(values)))))
        setattr(namespace, marker, True)


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="computedomain-controller",
        description=(
            "Runs the ComputeDomain controller: watches resource.nvidia.com/v1beta1 "
            "ComputeDomains, creates their IMEX daemon DaemonSet and ResourceClaimTemplates "
            "exactly as NVIDIA's DRA driver expects, projects daemon state into status, and "
            "cleans up on deletion. Every flag can also be set by the environment variable "
            "shown in brackets (flags win). Also installed as compute-domain-controller, and "
            "it takes NVIDIA's compute-domain-controller command line unchanged: its flags and "
            "variables, Go-style -flag spellings, and every feature gate NVIDIA's components "
            "know."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,
    )
    for row in SETTINGS:
        extra: dict[str, Any] = {}
        if row.repeatable:
            extra["action"] = _Repeated
        if row.parse is _bool:
            extra.update(nargs="?", const="true")  # Go bool flags need no value
        envs = " or ".join((row.env, *row.fallback_env))
        parser.add_argument(
            *row.flags,
            dest=row.option,
            default=row.from_env(env),
            help=f"{row.help} [{envs}{'; ' + row.check.accepts if row.check else ''}]",
            **extra,
        )
    inert = parser.add_argument_group(
        "NVIDIA's flags without effect here",
        "Accepted so that NVIDIA's Deployment runs this controller unchanged; a value is checked "
        "as NVIDIA checks it, and one set is logged once at start.",
    )
    for flag in INERT_FLAGS:
        extra = {"nargs": "?", "const": "true"} if flag.boolean else {}
        inert.add_argument(
            flag.flag,
            dest=flag.option,
            default=env.get(flag.env, argparse.SUPPRESS),
            help=f"{flag.help} [{flag.env}; {flag.accepts}]",
            **extra,
        )
    parser.add_argument("--version", action="version", version=f"%(prog)s {distribution_version()}")
    return parser


def go_style(argv: Sequence[str]) -> list[str]:
    """``-name`` and ``-name=value`` as ``--name``: NVIDIA's binary parses flags with Go's flag
    package, which takes one dash or two for every flag (``-v`` stays as it is)."""
    long_flags = {f for row in SETTINGS for f in row.flags if f.startswith("--")}
    long_flags |= {row.flag for row in INERT_FLAGS} | {"--version", "--help"}
    out: list[str] = []
    for position, arg in enumerate(argv):
        if arg == "--":
            return out + list(argv[position:])
        if (
            arg.startswith("-")
            and not arg.startswith("--")
            and f"-{arg.split('=', 1)[0]}" in long_flags
        ):
            arg = f"-{arg}"
        out.append(arg)
    return out


def settings_from_namespace(ns: argparse.Namespace) -> Settings:
    values: dict[str, dict[str, Any]] = {"": {}, "reconciler": {}, "daemon": {}}
    for row in SETTINGS:
        raw = getattr(ns, row.option)
        group, _, field = row.dest.rpartition(".")
        values[group][field] = row.value(None if raw is None else str(raw))
    notices = []
    for flag in INERT_FLAGS:
        raw = getattr(ns, flag.option, None)
        if raw:
            flag.parse(str(raw), f"{flag.flag} / {flag.env}")
            notices.append(f"{flag.flag} / {flag.env}={raw} has no effect here: {flag.help}")
    ignored = ignored_feature_gates(str(getattr(ns, "feature_gates", None) or ""))
    if ignored:
        pairs = ",".join(f"{name}={str(on).lower()}" for name, on in ignored.items())
        notices.append(
            f"feature gates {pairs} concern NVIDIA's kubelet plugin or logging, not the "
            "ComputeDomain controller: ignored"
        )
    top = values[""]
    top["notices"] = tuple(notices)
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
    top["placement_webhook_hosts"] = top["placement_webhook_hosts"] or (
        f"computedomain-placement-webhook.{reconciler.driver_namespace}.svc",
    )
    return Settings(reconciler=reconciler, **top)


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Settings from flags and environment; raises ConfigError with a clear message."""
    args = go_style(sys.argv[1:] if argv is None else argv)
    return settings_from_namespace(build_parser(environ).parse_args(args))
