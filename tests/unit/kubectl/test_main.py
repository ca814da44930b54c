"""`kubectl cdom`'s kubectl conventions: the global flags, the namespace a command defaults to, and
what a user who may read only their own namespace is told (an in-memory apiserver that refuses
every cluster-wide LIST, as a namespace-scoped Role does)."""

from __future__ import annotations

import argparse
from typing import Any, cast

import pytest

from computedomain import distribution_version
from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.domain.childkinds import CHILDREN, Scope
from computedomain.kubectl import main as plugin
from computedomain.runtime.client import Impersonation, KubeClient
from computedomain.runtime.errors import ApiError
from computedomain.runtime.resources import NODES, PODS, RESOURCE_CLAIM_TEMPLATES, Resource
from tests.kit.fakeapi import FakeApiServer

UID = "uid-1"


def test_the_global_flags_are_kubectls() -> None:
    args = plugin.parse(
        [
            "--kubeconfig=/k",
            "--context",
            "prod",
            "--as",
            "system:serviceaccount:team:ml",
            "--as-group",
            "a",
            "--as-group",
            "b",
            "--as-uid",
            "1234",
            "describe",
            "job",
        ]
    )
    assert (args.kubeconfig, args.context, args.namespace) == ("/k", "prod", None)
    assert plugin.impersonation(args) == Impersonation(
        "system:serviceaccount:team:ml", ("a", "b"), "1234"
    )
    assert plugin.impersonation(plugin.parse(["cliques"])) is None
    assert plugin.parse(["describe", "job", "-n", "other"]).namespace == "other"


@pytest.mark.parametrize("flag", ["--as-group", "--as-uid"])
def test_a_group_or_uid_without_a_user_is_bad_usage(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        plugin.parse([flag, "a", "cliques"])
    assert exited.value.code == plugin.EXIT_USAGE
    assert f"{flag} needs --as" in capsys.readouterr().err


def test_version_is_the_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        plugin.parse(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"kubectl-cdom {distribution_version()}\n"


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _parsers(sub)
    return found


def test_help_explains_every_flag() -> None:
    unexplained = [
        f"{parser.prog} {action.option_strings or action.dest}"
        for parser in _parsers(plugin.build_parser())
        for action in parser._actions
        if not action.help
    ]
    assert unexplained == []


class NamespaceOnly(FakeApiServer):
    """An apiserver as a user bound to a Role in ``team`` sees it: every LIST outside it is a
    403, as RBAC answers (but of the kinds in ``cluster_wide``, a ClusterRole's)."""

    namespace = "team"  # the kubeconfig context's
    cluster_wide: frozenset[str] = frozenset()

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        metadata_only: bool = False,
        limit: int | None = None,
        continue_token: str | None = None,
        **more: Any,
    ) -> dict[str, Any]:
        if namespace != "team" and res.plural not in self.cluster_wide:
            self._record("list", res, namespace, label_selector or "")  # asked, though refused
            where = (
                "at the cluster scope" if namespace is None else f'in the namespace "{namespace}"'
            )
            raise ApiError(
                403,
                "Forbidden",
                f'{res.plural} is forbidden: User "ml" cannot list resource "{res.plural}" in '
                f'API group "{res.group}" {where}',
            )
        return await super().list(
            res, namespace, label_selector, metadata_only, limit, continue_token, **more
        )

    async def close(self) -> None:
        pass


def domain_world() -> NamespaceOnly:
    api = NamespaceOnly()
    conditions = [
        {"type": "Ready", "status": "False", "reason": "DaemonsNotReady", "message": "1 of 2"}
    ]
    api.add(
        COMPUTE_DOMAINS,
        {
            "metadata": {"name": "job", "namespace": "team", "uid": UID},
            "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "job-ch"}}},
            "status": {"conditions": conditions},
        },
    )
    api.add(
        RESOURCE_CLAIM_TEMPLATES,
        {"metadata": {"name": "job-ch", "namespace": "team", "labels": {c.CD_LABEL: UID}}},
    )
    api.add(
        PODS,
        {
            "metadata": {"name": "worker-0", "namespace": "team"},
            "spec": {"nodeName": "n1", "resourceClaims": [{"resourceClaimTemplateName": "job-ch"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        },
    )
    return api


def served(monkeypatch: pytest.MonkeyPatch, api: FakeApiServer) -> None:
    async def client(args: argparse.Namespace) -> KubeClient:
        return cast(KubeClient, api)

    monkeypatch.setattr(plugin, "_client", client)


def test_describe_defaults_to_the_contexts_namespace_and_names_what_it_cannot_see(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api = domain_world()
    served(monkeypatch, api)
    assert plugin.main(["describe", "job"]) == 1
    out = capsys.readouterr().out
    print(out)
    assert ("get", "computedomains", "team/job") in api.calls
    # The workload pods come from the domain's namespace, their claims' template too: never a
    # LIST of every pod, claim or template (its daemons' are selected by the domain's UID).
    assert ("list", "pods", "team/") in api.calls
    assert ("list", "resourceclaimtemplates", f"team/{c.CD_LABEL}={UID}") in api.calls
    everything = [("list", kind, "") for kind in ("pods", "resourceclaimtemplates")]
    assert not set(everything) & set(api.calls)
    lines = out.splitlines()
    assert "ResourceClaimTemplate team/job-ch: present" in out
    assert "  worker-0  Running Ready  on n1" in lines
    assert "Nodes: not shown" in lines
    [hidden] = [line for line in lines if line.startswith("not shown")]
    # The daemons' children are named by the child kinds' table, in its order.
    daemons_children = [
        f"IMEX {child.display}s" for child in CHILDREN if child.scope is Scope.DRIVER_NAMESPACE
    ]
    assert hidden == "not shown (forbidden): " + ", ".join(
        [
            *daemons_children,
            "IMEX daemon pods",
            "ComputeDomainCliques",
            "nodes",
            "ResourceClaims of other namespaces",
            "controller pods",
        ]
    )
    # The verdict as far as it goes: the domain's own Ready condition.
    assert lines[-3:-1] == ["First broken link: Ready", "  DaemonsNotReady: 1 of 2"]


def test_describe_without_its_own_namespace_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served(monkeypatch, domain_world())
    assert plugin.main(["describe", "job", "-n", "elsewhere"]) == plugin.EXIT_CLUSTER
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("error: ComputeDomain elsewhere/job not found")


def test_cliques_without_nodes_says_what_grants_them_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api = domain_world()
    served(monkeypatch, api)
    assert plugin.main(["cliques"]) == plugin.EXIT_CLUSTER
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("error: cannot list nodes: 403 Forbidden")
    assert "a ClusterRole with list on nodes" in err


def test_cliques_without_every_domain_names_the_contexts_own(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api = NamespaceOnly()
    api.cluster_wide = frozenset({"nodes"})
    api.add(COMPUTE_DOMAINS, {"metadata": {"name": "job", "namespace": "team", "uid": UID}})
    api.add(
        NODES,
        {"metadata": {"name": "n1", "labels": {c.CD_LABEL: UID, c.GPU_CLIQUE_NODE_LABEL: "A.0"}}},
    )
    served(monkeypatch, api)
    assert plugin.main(["cliques"]) == 0
    out, err = capsys.readouterr()
    assert "team/job(1)" in out
    assert err == (
        "not shown (forbidden): the names of ComputeDomains outside namespace team (shown by UID)\n"
    )
