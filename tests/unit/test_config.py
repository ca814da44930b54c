import pytest

from computedomain.config import (
    ConfigError,
    build_parser,
    parse_duration,
    parse_feature_gates,
    parse_settings,
)

BASE_ENV = {"IMAGE_NAME": "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.0"}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15s", 15.0), ("1m30s", 90.0), ("250ms", 0.25), ("2", 2.0), ("1h", 3600.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "15x", "s", "1m 3s", "-"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="invalid duration"):
        parse_duration(text)


def test_feature_gates_defaults_and_overrides() -> None:
    gates = parse_feature_gates("ComputeDomainCliques=false,")
    assert gates == {
        "IMEXDaemonsWithDNSNames": True,
        "ComputeDomainCliques": False,
        "CrashOnNVLinkFabricErrors": True,
        "HostManagedIMEXDaemon": False,
    }


def test_nvidia_chart_gates_are_accepted_and_ignored() -> None:
    # The FEATURE_GATES string NVIDIA's v0.4.0 binary writes lists every gate it knows.
    nvidia = (
        "AllAlpha=false,AllBeta=false,ComputeDomainCliques=true,ContextualLogging=true,"
        "CrashOnNVLinkFabricErrors=true,DeviceMetadata=false,DynamicMIG=false,"
        "IMEXDaemonsWithDNSNames=true,LoggingAlphaOptions=false,LoggingBetaOptions=true,"
        "MPSSupport=false,NVMLDeviceHealthCheck=false,PassthroughSupport=false,"
        "TimeSlicingSettings=false,"
    )
    assert parse_feature_gates(nvidia) == parse_feature_gates("")


@pytest.mark.parametrize(
    ("text", "dns", "cliques", "crash", "host"),
    [
        # As NVIDIA's binary: AllBeta/AllAlpha set every gate of that stage left unnamed.
        ("AllBeta=false", False, False, False, False),
        (
            "AllBeta=false,ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=true",
            True,
            True,
            False,
            False,
        ),
        ("AllAlpha=true", True, True, True, True),
        ("AllAlpha=true,HostManagedIMEXDaemon=false,AllBeta=true", True, True, True, False),
    ],
)
def test_all_alpha_and_all_beta_set_the_unnamed_gates_of_their_stage(
    text: str, dns: bool, cliques: bool, crash: bool, host: bool
) -> None:
    assert parse_feature_gates(text) == {
        "IMEXDaemonsWithDNSNames": dns,
        "ComputeDomainCliques": cliques,
        "CrashOnNVLinkFabricErrors": crash,
        "HostManagedIMEXDaemon": host,
    }


def test_gate_values_are_gos_booleans() -> None:
    for text in ("1", "t", "T", "TRUE", "true", "True", "tRuE"):
        assert parse_feature_gates(f"HostManagedIMEXDaemon={text}")["HostManagedIMEXDaemon"]
    for text in ("0", "f", "F", "FALSE", "false", "False"):
        assert not parse_feature_gates(f"ComputeDomainCliques={text}")["ComputeDomainCliques"]


def test_daemon_image_is_found_from_the_kubelet_plugin_unless_given() -> None:
    # Empty: the reconciler reads the image of NVIDIA's kubelet plugin (coexistence.daemon_image).
    assert parse_settings([], {}).daemon.image == ""
    given = "registry.example/dra-driver-nvidia-gpu:v0.4.1"
    assert parse_settings([], {"IMAGE_NAME": given}).daemon.image == given


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Nope=true", "unrecognized feature gate: Nope "),
        ("MPSSupport=true,LoggingStableOptions=true", "unrecognized feature gate: LoggingStable"),
        ("ComputeDomainCliques=maybe", "invalid feature gate"),
        ("ComputeDomainCliques", "missing bool value for ComputeDomainCliques"),
        # NVIDIA's words for the one rule among the controller's own gates.
        (
            "IMEXDaemonsWithDNSNames=false",
            "feature gate ComputeDomainCliques requires IMEXDaemonsWithDNSNames to also be enabled",
        ),
        ("AllBeta=true,IMEXDaemonsWithDNSNames=false", "requires IMEXDaemonsWithDNSNames"),
    ],
)
def test_feature_gates_reject(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_feature_gates(text)


def test_upstream_env_names_are_honoured() -> None:
    env = {
        **BASE_ENV,
        "NAMESPACE": "nvidia-dra-driver-gpu",
        "ADDITIONAL_NAMESPACES": "old-ns, nvidia-dra-driver-gpu",
        "CD_DAEMON_IMAGE_PULL_SECRET_NAMES": "a,b",
        "LOG_VERBOSITY_CD_DAEMON": "6",
        "MAX_NODES_PER_IMEX_DOMAIN": "16",
        "LEADER_ELECTION_ENABLED": "false",
        "LEADER_ELECTION_LEASE_DURATION": "20s",
        "KUBE_API_QPS": "7.5",
        "HTTP_ENDPOINT": ":9090",
    }
    s = parse_settings([], env)
    assert s.driver_namespace == "nvidia-dra-driver-gpu"
    assert s.managed_namespaces == ("nvidia-dra-driver-gpu", "old-ns")
    assert s.daemon.image_pull_secrets == ("a", "b")
    assert s.daemon.log_verbosity == 6
    assert s.daemon.max_nodes_per_imex_domain == 16
    assert s.leader_election is False
    assert s.lease_duration == 20.0
    assert s.lease_namespace == "nvidia-dra-driver-gpu"
    assert s.kube_api_qps == 7.5
    assert s.metrics_address == ":9090"


def test_flags_win_over_env() -> None:
    s = parse_settings(["--namespace", "flag-ns", "--workers", "3"], {**BASE_ENV, "NAMESPACE": "x"})
    assert (s.driver_namespace, s.workers) == ("flag-ns", 3)


def test_defaults() -> None:
    s = parse_settings([], BASE_ENV)
    assert s.leader_election is True
    assert (s.lease_duration, s.renew_deadline, s.retry_period) == (15.0, 10.0, 2.0)
    assert s.lease_name == "nvidia-compute-domain-controller"
    assert s.daemon.max_nodes_per_imex_domain == 18
    assert s.cliques_enabled is True
    assert s.probe_address == ":8081"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"IMAGE_NAME": "a b"}, "IMAGE_NAME: 'a b' contains white space"),
        ({**BASE_ENV, "LEADER_ELECTION_RENEW_DEADLINE": "20s"}, "lease duration > renew"),
        ({**BASE_ENV, "WORKERS": "0"}, "must be 1 to 256"),
        ({**BASE_ENV, "LOG_FORMAT": "xml"}, "want json or text"),
        ({**BASE_ENV, "HTTP_ENDPOINT": "localhost:http"}, "invalid bind address"),
    ],
)
def test_invalid_settings_are_explained(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_settings([], env)


def test_help_names_every_env_var() -> None:
    text = build_parser({}).format_help()
    for env in (
        "IMAGE_NAME",
        "NAMESPACE",
        "FEATURE_GATES",
        "LEADER_ELECTION_ENABLED",
        "KUBE_API_QPS",
    ):
        assert f"[{env}]" in text or f"[{env};" in text


def test_operations_doc_lists_every_setting_with_its_range() -> None:
    from pathlib import Path

    from computedomain.config import settings_markdown

    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    start = doc.index("<!-- settings-table:")
    start = doc.index("\n", start) + 1
    end = doc.index("<!-- end settings-table -->")
    assert doc[start:end] == settings_markdown(), (
        "docs/operations.md's settings table is stale: paste "
        "`uv run python -c 'from computedomain.config import settings_markdown as m; print(m())'`"
    )


def test_operations_doc_lists_nvidias_inert_flags() -> None:
    from pathlib import Path

    from computedomain.config import inert_flags_markdown

    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    start = doc.index("<!-- inert-flags-table:")
    start = doc.index("\n", start) + 1
    end = doc.index("<!-- end inert-flags-table -->")
    assert doc[start:end] == inert_flags_markdown(), (
        "docs/operations.md's table of NVIDIA's inert flags is stale: paste `uv run python -c "
        "'from computedomain.config import inert_flags_markdown as m; print(m())'`"
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ORPHAN_SWEEP_INTERVAL": "0"}, "at least 10s"),
        ({"RECONCILE_TIMEOUT": "0"}, "at least 1s"),
        ({"NAMESPACE": "Not_A_Namespace"}, "not a valid namespace name"),
        ({"ADDITIONAL_NAMESPACES": ",,Bad_NS,,"}, "'Bad_NS' is not a valid namespace name"),
        ({"CD_DAEMON_IMAGE_PULL_SECRET_NAMES": "a b,,UPPER"}, "'a b' is not a valid Secret"),
        ({"CD_DAEMON_IMAGE_PULL_SECRET_NAMES": "ok,UPPER"}, "'UPPER' is not a valid Secret"),
        ({"CD_DAEMON_PRIORITY_CLASS_NAME": "High Prio"}, "not a valid PriorityClass name"),
        ({"LEADER_ELECTION_LEASE_LOCK_NAMESPACE": "X"}, "not a valid namespace name"),
        ({"IMAGE_NAME": "has space:v1"}, "contains white space"),
        ({"MAX_NODES_PER_IMEX_DOMAIN": "0"}, "must be 1 to 2048"),
        ({"LOG_VERBOSITY": "-1"}, "must be >= 0"),
        ({"V": "-1"}, "must be >= 0"),
        ({"LOG_VERBOSITY_CD_DAEMON": "-1"}, "must be >= 0"),
    ],
)
def test_out_of_range_settings_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_settings([], env)


def test_empty_optional_names_are_fine() -> None:
    s = parse_settings([], {"CD_DAEMON_PRIORITY_CLASS_NAME": "", "ADDITIONAL_NAMESPACES": "a,,b,"})
    assert s.reconciler.additional_namespaces == ("a", "b")


@pytest.mark.parametrize(
    ("text", "resources"),
    [
        ("", None),
        ("  ", None),
        ("{}", None),
        # Helm's toJson writes `cpu: 1` as a number; quantities become strings.
        ('{"limits": {"cpu": 1, "memory": "1Gi"}}', {"limits": {"cpu": "1", "memory": "1Gi"}}),
        (
            '{"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}}',
            {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}},
        ),
        (  # equal amounts in other units: fine
            '{"requests": {"cpu": "500m"}, "limits": {"cpu": "0.5"}}',
            {"requests": {"cpu": "500m"}, "limits": {"cpu": "0.5"}},
        ),
    ],
)
def test_daemon_resources_json(text: str, resources: object) -> None:
    parsed = parse_settings([], {**BASE_ENV, "CD_DAEMON_RESOURCES_JSON": text})
    assert parsed.daemon.daemon_resources == resources


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{cpu: 1}", "CD_DAEMON_RESOURCES_JSON: not valid JSON .*; want e.g."),
        ('["limits"]', "want a JSON object"),
        ('{"claims": []}', "unknown key 'claims'"),
        ('{"limits": "1Gi"}', "limits must be an object"),
        ('{"limits": {"memory": "1 Gi"}}', "limits.memory: '1 Gi' is not a Kubernetes quantity"),
        ('{"requests": {"cpu": true}}', "requests.cpu: True is not a Kubernetes quantity"),
        ('{"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}}', "requests.cpu 2 exceeds"),
        ('{"requests": {"memory": "2Gi"}, "limits": {"memory": "2G"}}', "exceeds limits.memory"),
    ],
)
def test_bad_daemon_resources_json_is_one_clear_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        parse_settings([], {**BASE_ENV, "CD_DAEMON_RESOURCES_JSON": text})
    assert "\n" not in str(refused.value)
    assert str(refused.value).startswith("--cd-daemon-resources-json / CD_DAEMON_RESOURCES_JSON:")


# ---- IMEX mode and isolation (contract §18): upstream's words, one line each --------------------

HOST_GATE = "HostManagedIMEXDaemon=true"


def test_imex_mode_and_isolation_default_to_driver_managed_domain() -> None:
    settings = parse_settings([], {})
    assert settings.reconciler.imex_mode == "driverManaged"
    assert settings.reconciler.host_managed is False
    assert settings.imex_isolation == "domain"
    assert settings.daemon.feature_gates["HostManagedIMEXDaemon"] is False
    # driverManaged keeps the gates as given, also with the host gate on.
    gates = parse_settings([], {"FEATURE_GATES": HOST_GATE}).daemon.feature_gates
    assert (gates["IMEXDaemonsWithDNSNames"], gates["ComputeDomainCliques"]) == (True, True)


def test_host_managed_with_its_gate_forces_dns_names_and_cliques_off() -> None:
    settings = parse_settings(
        ["--imex-mode", "hostManaged"],
        {"FEATURE_GATES": f"{HOST_GATE},ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=true"},
    )
    assert settings.reconciler.host_managed is True
    gates = settings.daemon.feature_gates
    assert gates["IMEXDaemonsWithDNSNames"] is False
    assert gates["ComputeDomainCliques"] is False
    assert settings.cliques_enabled is False
    env = parse_settings([], {"IMEX_MODE": "hostManaged", "FEATURE_GATES": HOST_GATE})
    assert env.reconciler.imex_mode == "hostManaged"


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"IMEX_MODE": "hostManaged"},
            'imex.mode="hostManaged" requires the HostManagedIMEXDaemon feature gate to be enabled',
        ),
        (
            {"IMEX_MODE": "hostManaged", "FEATURE_GATES": "HostManagedIMEXDaemon=false"},
            'imex.mode="hostManaged" requires the HostManagedIMEXDaemon feature gate to be enabled',
        ),
        ({"IMEX_MODE": "hostmanaged"}, 'unknown imex.mode "hostmanaged"'),
        ({"IMEX_MODE": ""}, 'unknown imex.mode ""'),
        (
            {"IMEX_ISOLATION": "pod"},
            'unknown imex.isolation "pod": must be "domain" or "channel"',
        ),
        (
            {"IMEX_ISOLATION": "channel"},
            "not supported yet: per-workload IMEX channel allocation is not implemented",
        ),
        (
            {"IMEX_MODE": "hostManaged", "FEATURE_GATES": HOST_GATE, "IMEX_ISOLATION": "channel"},
            "not supported yet: per-workload IMEX channel allocation is not implemented",
        ),
    ],
)
def test_imex_errors_are_upstreams_lines(env: dict[str, str], line: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_settings([], env)
    assert str(raised.value) == line


def test_help_explains_imex_mode_and_isolation() -> None:
    text = " ".join(build_parser({}).format_help().split())
    assert "[IMEX_MODE; driverManaged or hostManaged]" in text
    assert "[IMEX_ISOLATION; domain]" in text
    assert "HostManagedIMEXDaemon (default false)" in text


def test_nvidia_controller_selectors_default_to_both_chart_labels_and_gpu_operators() -> None:
    assert parse_settings([], {}).nvidia_controller_selectors == (
        "dra-driver-nvidia-gpu-component=controller",
        "nvidia-dra-driver-gpu-component=controller",
        "app=nvidia-dra-driver-controller",
    )


@pytest.mark.parametrize(
    ("text", "selectors"),
    [
        ("my-driver-component=controller", ("my-driver-component=controller",)),
        ("a=b, c!=d; e", ("a=b,c!=d", "e")),
        ("", ()),  # detection off
    ],
)
def test_nvidia_controller_selectors_can_be_overridden(
    text: str, selectors: tuple[str, ...]
) -> None:
    env = {"NVIDIA_CONTROLLER_SELECTORS": text}
    assert parse_settings([], env).nvidia_controller_selectors == selectors


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("app.kubernetes.io/component=controller", "matches this controller's own pods"),
        ("a=b;app.kubernetes.io/part-of", "matches this controller's own pods"),
        ("x in (a,b)", "is not a label key"),
    ],
)
def test_nvidia_controller_selectors_that_cannot_work_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_settings([], {"NVIDIA_CONTROLLER_SELECTORS": text})
