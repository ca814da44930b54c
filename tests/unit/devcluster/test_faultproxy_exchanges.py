"""The fault proxy's account of a request: its verb as an audit log would name it (a GET of a
collection is a LIST, a watch a WATCH) and the resource its path names, by which the soak
counts a controller's requests per CD."""

from __future__ import annotations

import pytest

from computedomain.devcluster.faultproxy import Exchange


def exchange(method: str, path: str, *, watch: bool = False) -> Exchange:
    return Exchange(0.0, 0.0, method, path, "", watch, 200, "")


@pytest.mark.parametrize(
    ("method", "path", "watch", "verb", "resource"),
    [
        ("GET", "/api/v1/namespaces/ns/pods", False, "LIST", "pods"),
        ("GET", "/api/v1/namespaces/ns/pods", True, "WATCH", "pods"),
        ("GET", "/api/v1/nodes", False, "LIST", "nodes"),
        ("GET", "/api/v1/nodes/gb200-r01-n01", False, "GET", "nodes"),
        ("GET", "/api/v1/namespaces/driver", False, "GET", "namespaces"),
        ("GET", "/api/v1/namespaces", False, "LIST", "namespaces"),
        (
            "PATCH",
            "/apis/resource.nvidia.com/v1beta1/namespaces/ns/computedomains/cd/status",
            False,
            "PATCH",
            "computedomains/status",
        ),
        ("PUT", "/apis/apps/v1/namespaces/driver/daemonsets/ds", False, "PUT", "daemonsets"),
        ("POST", "/apis/events.k8s.io/v1/namespaces/ns/events", False, "POST", "events"),
        (
            "GET",
            "/apis/resource.nvidia.com/v1beta1",
            False,
            "GET",
            "/apis/resource.nvidia.com/v1beta1",
        ),
    ],
)
def test_a_request_is_counted_by_its_verb_and_resource(
    method: str, path: str, watch: bool, verb: str, resource: str
) -> None:
    seen = exchange(method, path, watch=watch)
    assert (seen.verb, seen.resource) == (verb, resource)
