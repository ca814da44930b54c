"""`kubectl cdom` follows kubectl's conventions on the real control plane: `--as`, `--as-group` and
`--as-uid` act as a user bound only to a namespace-scoped Role (describe answers from what that
user may read and names in one line what it may not; cliques says in one line what it needs),
and `--context` picks a kubeconfig context whose namespace is `describe`'s default."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from computedomain.api import constants as c
from computedomain.runtime import resources as r
from computedomain.runtime.resources import Resource
from tests.integration.e2e_harness import EndToEnd, cd_ready, workload
from tests.kit.kubectl_plugin import cdom

pytestmark = pytest.mark.integration

RBAC = "rbac.authorization.k8s.io"
ROLES = Resource(RBAC, "v1", "roles", "Role", namespaced=True)
ROLE_BINDINGS = Resource(RBAC, "v1", "rolebindings", "RoleBinding", namespaced=True)
READ = ["get", "list", "watch"]
# What an ML engineer's namespace Role grants: their domains, pods, claims, templates, Events.
ENGINEER_RULES = [
    {"apiGroups": [c.GROUP], "resources": ["computedomains"], "verbs": READ},
    {"apiGroups": [""], "resources": ["pods", "events"], "verbs": READ},
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims", "resourceclaimtemplates"],
        "verbs": READ,
    },
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": READ},
]
GROUP = "ml-engineers"
NOT_SHOWN = (
    "not shown (forbidden): IMEX daemon ResourceClaimTemplates, IMEX daemon DaemonSets, IMEX "
    "daemon pods, ComputeDomainCliques, nodes, ResourceClaims of other namespaces, "
    "controller pods"
)


async def bind_engineers(e2e: EndToEnd) -> str:
    """The ServiceAccount ``ml`` and the group ``ml-engineers``, bound to the Role in the test's
    namespace only; the ServiceAccount's user name."""
    ns = e2e.namespace
    body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ml"}}
    await e2e.kube.create(r.SERVICE_ACCOUNTS, body, ns)
    role = {
        "apiVersion": f"{RBAC}/v1",
        "kind": "Role",
        "metadata": {"name": "ml-engineer"},
        "rules": ENGINEER_RULES,
    }
    await e2e.kube.create(ROLES, role, ns)
    binding = {
        "apiVersion": f"{RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "ml-engineer"},
        "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "ml-engineer"},
        "subjects": [
            {"kind": "ServiceAccount", "name": "ml", "namespace": ns},
            {"kind": "Group", "apiGroup": RBAC, "name": GROUP},
        ],
    }
    await e2e.kube.create(ROLE_BINDINGS, binding, ns)
    return f"system:serviceaccount:{ns}:ml"


def with_team_context(kubeconfig: Path, namespace: str, into: Path) -> Path:
    """A copy of ``kubeconfig`` with a context ``team``: the current one's cluster and user, and
    ``namespace``. Its current context stays the one without a namespace."""
    config = yaml.safe_load(kubeconfig.read_text())
    current = next(x for x in config["contexts"] if x["name"] == config["current-context"])
    assert not current["context"].get("namespace")
    team = {"name": "team", "context": {**current["context"], "namespace": namespace}}
    config["contexts"].append(team)
    into.write_text(yaml.safe_dump(config))
    return into


async def test_a_namespace_only_user_and_a_context_namespace(
    e2e: EndToEnd, kubeconfig_path: Path, tmp_path: Path
) -> None:
    user = await bind_engineers(e2e)
    await e2e.start_controller()
    await e2e.start_simulator()
    await e2e.create_cd("job", rct_name="job-channel")
    await e2e.run_workload(workload("job", 2, rct_name="job-channel", racks=["r01"]))
    await e2e.cd_until("job", cd_ready, "Ready")

    # As the admin: everything, no line about what is not shown.
    code, admin, err = await cdom(kubeconfig_path, "describe", "job", "-n", e2e.namespace)
    assert code == 0, err
    assert "not shown" not in admin

    # As the ServiceAccount bound to the namespace Role: the domain, its template and workload
    # pods, and the verdict; one line names what it may not read.
    code, out, err = await cdom(
        kubeconfig_path, "--as", user, "describe", "job", "-n", e2e.namespace
    )
    print(out)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("not shown")] == [NOT_SHOWN]
    assert lines[-1] == "No broken link: the domain is Ready."
    assert f"  ResourceClaimTemplate {e2e.namespace}/job-channel: present" in lines
    assert "Workload pods (2):" in lines
    assert "Nodes: not shown" in lines
    assert not [line for line in lines if "DaemonSet " in line]  # the admin's shows them
    assert [line for line in admin.splitlines() if "DaemonSet " in line]

    # A user in the bound group (--as-group): the same answer.
    code, grouped, err = await cdom(
        kubeconfig_path, "--as", "jane", "--as-group", GROUP, "describe", "job", "-n", e2e.namespace
    )
    assert (code, grouped) == (0, out), err
    # With a UID too (--as-uid, the Impersonate-Uid header the apiserver checks): the same.
    code, with_uid, err = await cdom(
        kubeconfig_path, "--as", "jane", "--as-group", GROUP, "--as-uid", "1234",
        "describe", "job", "-n", e2e.namespace,
    )  # fmt: skip
    assert (code, with_uid) == (0, out), err
    # Without the group the user may read nothing: one line, exit 3.
    code, none, err = await cdom(
        kubeconfig_path, "--as", "jane", "describe", "job", "-n", e2e.namespace
    )
    assert (code, none) == (3, "")
    assert err.count("\n") == 1
    assert err.startswith(f"error: cannot read ComputeDomain {e2e.namespace}/job: 403 Forbidden")

    # cliques reads every Node: one line says so and what grants it, exit 3, no traceback.
    code, out, err = await cdom(kubeconfig_path, "--as", user, "cliques")
    assert (code, out) == (3, "")
    assert err.count("\n") == 1
    assert err.startswith("error: cannot list nodes: 403 Forbidden")
    assert "a ClusterRole with list on nodes" in err

    # --context: its namespace is describe's default; the current context has none (default).
    kubeconfig = with_team_context(kubeconfig_path, e2e.namespace, tmp_path / "kubeconfig")
    code, out, err = await cdom(kubeconfig, "--context", "team", "describe", "job")
    assert code == 0, err
    assert out == admin
    code, out, err = await cdom(kubeconfig, "describe", "job")
    assert (code, err.strip()) == (3, "error: ComputeDomain default/job not found")
    code, out, err = await cdom(kubeconfig, "--context", "nope", "describe", "job")
    assert code == 3
    assert err.strip() == f"error: kubeconfig {kubeconfig}: no context named 'nope'"
