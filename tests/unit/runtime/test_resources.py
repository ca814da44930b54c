import pytest

from computedomain.runtime.resources import DAEMONSETS, EVENTS, NODES, PODS, Resource


def test_core_group_paths() -> None:
    assert PODS.api_version == "v1"
    assert PODS.path() == "/api/v1/pods"
    assert PODS.path("ns1") == "/api/v1/namespaces/ns1/pods"
    assert PODS.path("ns1", "p") == "/api/v1/namespaces/ns1/pods/p"
    assert NODES.path(name="n1", subresource="status") == "/api/v1/nodes/n1/status"


def test_named_group_paths() -> None:
    assert DAEMONSETS.api_version == "apps/v1"
    assert DAEMONSETS.path("x", "y", "status") == "/apis/apps/v1/namespaces/x/daemonsets/y/status"
    assert EVENTS.api_version == "events.k8s.io/v1"


def test_invalid_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="cluster-scoped"):
        NODES.path("ns")
    with pytest.raises(ValueError, match="subresource"):
        PODS.path("ns", subresource="status")
    with pytest.raises(ValueError, match="empty"):
        PODS.path("ns", "")


def test_resource_is_hashable_and_frozen() -> None:
    custom = Resource("example.com", "v1beta1", "widgets", "Widget", namespaced=True)
    assert {custom: 1}[Resource("example.com", "v1beta1", "widgets", "Widget", True)] == 1
