"""The settings table: one ``Setting`` row per flag of the controller, and ``Settings``, what
the rows fill in.

Every row names its flag, environment variable, default, parser (``parsers.py``), an optional
check (``checks.py``), help, and where the value goes in ``Settings``. Where NVIDIA's
controller has an environment variable, the name is the same, so our Deployment can be
swapped into an existing NVIDIA DRA driver install unchanged.

Adding a setting is one row, plus the field it fills (``Settings``, or ``DaemonSettings`` /
``ReconcilerSettings`` for what the reconciler gets). Bounding one is one ``check=`` argument.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from computedomain.api import constants as c
from computedomain.config.checks import (
    Check,
    above,
    at_least,
    cert_dir_or_none,
    file_or_none,
    no_white_space,
    seconds_at_least,
    url_path,
    valid_names,
    validated_by_parser,
)
from computedomain.config.parsers import (
    as_bind,
    as_bool,
    as_float,
    as_int,
    as_list,
    as_optional,
    as_text,
    imex_isolation,
    imex_mode,
    one_of,
    or_default,
    parse_duration,
    parse_feature_gates,
    pod_selectors,
    resource_requirements,
)
from computedomain.domain.placement import PLACEMENT_OPT_IN, RECORDED_CLIQUE_ANNOTATION
from computedomain.domain.settings import DaemonSettings, ReconcilerSettings


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
    Setting("--kubeconfig", "KUBECONFIG", None, as_optional,
            "kubeconfig file; empty: the pod's in-cluster credentials, or ~/.kube/config outside "
            "a cluster", "kubeconfig", check=Check("an existing file, or empty", file_or_none)),
    Setting("--namespace", "NAMESPACE", "default", or_default(lambda: "default"),
            "driver namespace: where the IMEX DaemonSets, daemon RCTs and cliques live",
            "daemon.driver_namespace", check=valid_names("namespace", label=True)),
    Setting("--additional-namespaces", "ADDITIONAL_NAMESPACES", "", as_list,
            "comma-separated extra namespaces searched for DaemonSets, pods and cliques "
            "(after moving the driver to another namespace); the flag may be repeated",
            "reconciler.additional_namespaces", check=valid_names("namespace", label=True),
            repeatable=True),
    Setting("--image-name", "IMAGE_NAME", "", as_text,
            "image of the IMEX daemon pods; must be NVIDIA's DRA driver image of the release the "
            "kubelet plugin runs. Empty (the default): the image NVIDIA's kubelet plugin "
            "DaemonSet in the driver namespace runs, read when each daemon DaemonSet is "
            f"created ({c.NVIDIA_DRIVER_IMAGE} while no plugin is found); a value given here "
            "wins, and a plugin running another image is then reported (DaemonImageDrift)",
            "daemon.image", check=no_white_space("an image reference")),
    Setting("--cd-daemon-image-pull-secret-names", "CD_DAEMON_IMAGE_PULL_SECRET_NAMES", "", as_list,
            "comma-separated image pull secrets copied into the daemon pod spec",
            "daemon.image_pull_secrets", check=valid_names("Secret", label=False)),
    Setting("--log-verbosity-cd-daemon", "LOG_VERBOSITY_CD_DAEMON", "4", as_int,
            "log verbosity passed to the IMEX daemons as LOG_VERBOSITY", "daemon.log_verbosity",
            check=at_least(0)),
    Setting("--max-nodes-per-imex-domain", "MAX_NODES_PER_IMEX_DOMAIN",
            str(c.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN), as_int,
            "IMEX slots per clique passed to the daemons (18 on GB200/GB300 NVL72)",
            "daemon.max_nodes_per_imex_domain", check=at_least(1, 2048)),
    Setting("--feature-gates", "FEATURE_GATES", "", parse_feature_gates, _GATES_HELP,
            "daemon.feature_gates",
            check=validated_by_parser("Name=bool,... of gates NVIDIA's components know")),
    Setting("--imex-mode", "IMEX_MODE", c.IMEX_MODE_DRIVER, imex_mode,
            f"who runs IMEX: {c.IMEX_MODE_DRIVER} (this controller creates a DaemonSet of IMEX "
            f"daemons per ComputeDomain) or {c.IMEX_MODE_HOST} (each node's own nvidia-imex "
            "service; per ComputeDomain only the workload claim template is created, with "
            f"allocationMode Single; needs the {c.GATE_HOST_MANAGED_IMEX} feature gate and "
            f"forces {c.GATE_DNS_NAMES} and {c.GATE_CLIQUES} off)", "reconciler.imex_mode",
            check=validated_by_parser(f"{c.IMEX_MODE_DRIVER} or {c.IMEX_MODE_HOST}")),
    Setting("--imex-isolation", "IMEX_ISOLATION", c.IMEX_ISOLATION_DOMAIN, imex_isolation,
            f"IMEX channel isolation: {c.IMEX_ISOLATION_DOMAIN} (all workloads of a "
            f"ComputeDomain share channel 0); {c.IMEX_ISOLATION_CHANNEL} (a channel per "
            "workload) is refused, as upstream, until NVIDIA implements it", "imex_isolation",
            check=validated_by_parser(c.IMEX_ISOLATION_DOMAIN)),
    Setting("--cd-daemon-priority-class-name", "CD_DAEMON_PRIORITY_CLASS_NAME", "", as_optional,
            "optional priorityClassName for the IMEX daemon pods (empty: none, as upstream)",
            "daemon.priority_class_name",
            check=valid_names("PriorityClass", label=False, optional=True)),
    Setting("--cd-daemon-resources-json", "CD_DAEMON_RESOURCES_JSON", "",
            resource_requirements("CD_DAEMON_RESOURCES_JSON"),
            "optional resources of the IMEX daemon container as JSON (NVIDIA's format): "
            "{\"requests\": {...}, \"limits\": {...}}; equal cpu and memory requests and limits "
            "(or limits alone) make the daemon pods Guaranteed QoS (empty: none, BestEffort, as "
            "upstream)", "daemon.daemon_resources",
            check=validated_by_parser("JSON {requests, limits} of quantities, requests <= limits")),
    Setting("--pod-name", "POD_NAME", None, or_default(socket.gethostname),
            "this replica's pod name, the leader-election identity prefix (default: hostname)",
            "pod_name"),
    Setting("--leader-election-enabled", "LEADER_ELECTION_ENABLED", "true", as_bool,
            "elect a leader through a Lease; only the leader writes (true/false)",
            "leader_election"),
    Setting("--leader-election-lease-lock-name", "LEADER_ELECTION_LEASE_LOCK_NAME",
            "nvidia-compute-domain-controller", as_text, "name of the leader-election Lease",
            "lease_name", check=valid_names("Lease", label=False)),
    Setting("--leader-election-lease-lock-namespace", "LEADER_ELECTION_LEASE_LOCK_NAMESPACE", "",
            as_optional, "namespace of the Lease (default: the driver namespace)",
            "lease_namespace",
            check=valid_names("namespace", label=True, optional=True)),
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
    Setting("--kube-api-qps", "KUBE_API_QPS", "100", as_float,
            "client-side rate limit for API requests per second (upstream default 5 throttles "
            "large domains; the apiserver's priority and fairness queues the rest, and 429 "
            "Retry-After is honoured)", "kube_api_qps", check=above(0)),
    Setting("--kube-api-burst", "KUBE_API_BURST", "200", as_int,
            "client-side burst above --kube-api-qps", "kube_api_burst", check=at_least(1)),
    Setting("--nvidia-controller-selectors", "NVIDIA_CONTROLLER_SELECTORS",
            ";".join(c.NVIDIA_CONTROLLER_SELECTORS), pod_selectors,
            "label selectors of NVIDIA's controller pods in the driver namespace, separated by "
            "';' (k=v, k!=v, k, !k; ',' within one selector means and): while one runs, this "
            "controller stands by, writing nothing to ComputeDomains until it is gone (Warning "
            "events, gauge, alert). The default finds the pods of NVIDIA's chart "
            "v0.4.0, v0.4.1 and v0.5, fresh (dra-driver-nvidia-gpu-component) "
            "or upgraded with nameOverride=nvidia-dra-driver-gpu; with another nameOverride add "
            "<nameOverride>-component=controller; empty: no detection and no stand-by",
            "nvidia_controller_selectors",
            check=validated_by_parser("label selectors separated by ';', none matching our pods")),
    Setting("--http-endpoint", "HTTP_ENDPOINT", ":8080", as_bind,
            "[host]:port serving Prometheus metrics; empty disables it", "metrics_address"),
    Setting("--metrics-path", "METRICS_PATH", "/metrics", as_text,
            "HTTP path of the metrics endpoint", "metrics_path",
            check=Check("a path starting with '/'", url_path)),
    Setting("--probe-address", "PROBE_ADDRESS", ":8081", as_bind,
            "[host]:port serving /healthz and /readyz; empty disables it", "probe_address"),
    Setting("--log-verbosity", "LOG_VERBOSITY", "0", as_int,
            "controller log verbosity (klog's -v; NVIDIA's Deployment passes -v "
            "$(LOG_VERBOSITY)): 0 state changes, 4 per-reconcile detail, 6 API chatter, more "
            "adds nothing", "log_verbosity", check=at_least(0), aliases=("-v", "--v"),
            fallback_env=("V",)),
    Setting("--log-format", "LOG_FORMAT", "json", one_of("json", "text"),
            "log format: json or text (NVIDIA's --logging-format / LOGGING_FORMAT is the same "
            "setting)", "log_format", check=validated_by_parser("json or text"),
            aliases=("--logging-format",), fallback_env=("LOGGING_FORMAT",)),
    Setting("--workers", "WORKERS", "8", as_int,
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
    Setting("--placement-webhook-address", "PLACEMENT_WEBHOOK_ADDRESS", "", as_bind,
            "[host]:port of the placement webhook (HTTPS): a mutating admission webhook that "
            "gives each pod using an opted-in ComputeDomain's channel ResourceClaimTemplate a "
            f"required node affinity to one NVLink clique, decided once per ComputeDomain (the "
            f"clique it uses, else the one with the most free nodes that fits spec.numNodes) "
            f"and recorded in its {RECORDED_CLIQUE_ANNOTATION} annotation; opt-in by the label "
            f"{PLACEMENT_OPT_IN}=true on the namespace or the annotation on the ComputeDomain. "
            "Empty (the default): no webhook", "placement_webhook_address"),
    Setting("--placement-webhook-cert-dir", "PLACEMENT_WEBHOOK_CERT_DIR", "", as_optional,
            "directory holding the webhook's tls.crt and tls.key (a cert-manager Secret "
            "mounted; cert-manager's CA injector writes the caBundle). Empty: the controller "
            "makes a CA and a serving certificate, keeps them in the Secret "
            "--placement-webhook-secret, and writes the CA into the caBundle of "
            "--placement-webhook-configuration", "placement_webhook_cert_dir",
            check=Check("a directory with tls.crt and tls.key, or empty", cert_dir_or_none)),
    Setting("--placement-webhook-secret", "PLACEMENT_WEBHOOK_SECRET",
            "computedomain-placement-webhook-tls", as_text,
            "Secret in the driver namespace holding the certificate the controller makes "
            "(shared by the replicas)", "placement_webhook_secret",
            check=valid_names("Secret", label=False)),
    Setting("--placement-webhook-configuration", "PLACEMENT_WEBHOOK_CONFIGURATION",
            "computedomain-placement", as_text,
            "MutatingWebhookConfiguration whose webhooks' caBundle the controller writes "
            "(checked again every minute: an upgrade that resets it gets it back)",
            "placement_webhook_configuration", check=valid_names("configuration", label=False)),
    Setting("--placement-webhook-hosts", "PLACEMENT_WEBHOOK_HOSTS", "", as_list,
            "comma-separated DNS names and IP addresses the certificate the controller makes "
            "is valid for; empty: computedomain-placement-webhook.<driver namespace>.svc (the "
            "chart's Service)", "placement_webhook_hosts"),
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


def environ(**values: str) -> dict[str, str]:
    """The environment that sets these settings, by option name (``namespace="x"`` gives
    ``{"NAMESPACE": "x"}``), for whoever starts a controller."""
    by_option = {row.option: row.env for row in SETTINGS}
    unknown = sorted(set(values) - by_option.keys())
    if unknown:
        raise KeyError(f"no such settings: {', '.join(unknown)}")
    return {by_option[option]: value for option, value in values.items()}
