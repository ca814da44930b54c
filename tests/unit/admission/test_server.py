"""The AdmissionReview endpoint over TLS with the certificate the controller makes: a placed pod
gets the JSONPatch, anything else (another kind, no placement, a failure) is allowed unchanged."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from computedomain.admission import certificates
from computedomain.admission.placer import Placement
from computedomain.admission.server import DOMAIN_PATH, NAMESPACE_PATH, WebhookServer

POD = {"metadata": {"generateName": "w-"}, "spec": {"containers": []}}


def review(kind: str = "Pod", operation: str = "CREATE") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": kind},
            "operation": operation, "namespace": "team", "object": POD,
        },
    }  # fmt: skip


class Places:
    """The placer's stand-in: what it was asked, and what it answers."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, bool]] = []
        self.answer: Placement | None = Placement("team/job", "A.0")
        self.fail = False
        self.outcomes: list[str] = []

    def observe(self, outcome: str, seconds: float) -> None:
        assert 0 <= seconds < 5
        self.outcomes.append(outcome)

    async def __call__(
        self, namespace: str, pod: dict[str, Any], namespace_opted_in: bool
    ) -> Placement | None:
        self.asked.append((namespace, namespace_opted_in))
        if self.fail:
            raise RuntimeError("the apiserver is away")
        return self.answer


@pytest.fixture
async def served() -> AsyncIterator[tuple[WebhookServer, Places, ssl.SSLContext]]:
    made = certificates.issue(["127.0.0.1", "webhook.example.svc"])
    places = Places()
    server = WebhookServer(places, "127.0.0.1:0", made.ssl_context(), observe=places.observe)
    await server.start()
    trust = ssl.create_default_context(cadata=made.ca_pem.decode())
    try:
        yield server, places, trust
    finally:
        await server.stop()


async def post(
    served: tuple[WebhookServer, Places, ssl.SSLContext], path: str, body: Any
) -> tuple[int, Any]:
    server, _, trust = served
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{server.url_base}{path}", json=body, ssl=trust) as answer,
    ):
        return answer.status, await answer.json()


async def test_a_placed_pod_gets_the_affinity_patch(
    served: tuple[WebhookServer, Places, ssl.SSLContext],
) -> None:
    status, body = await post(served, NAMESPACE_PATH, review())
    assert status == 200
    response = body["response"]
    assert (response["uid"], response["allowed"], response["patchType"]) == (
        "u-1",
        True,
        "JSONPatch",
    )
    (op,) = json.loads(base64.b64decode(response["patch"]))
    terms = op["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["A.0"]
    assert served[1].asked == [("team", True)]
    assert served[1].outcomes == ["placed"]


async def test_the_domain_path_asks_for_the_domains_own_opt_in(
    served: tuple[WebhookServer, Places, ssl.SSLContext],
) -> None:
    await post(served, DOMAIN_PATH, review())
    assert served[1].asked == [("team", False)]


@pytest.mark.parametrize("case", ["unplaced", "failure", "not a pod", "an update", "a dry run"])
async def test_everything_else_is_allowed_unchanged(
    served: tuple[WebhookServer, Places, ssl.SSLContext], case: str
) -> None:
    places = served[1]
    places.answer = Placement("team/job", None) if case == "unplaced" else places.answer
    places.fail = case == "failure"
    body = review(
        kind="Service" if case == "not a pod" else "Pod",
        operation="UPDATE" if case == "an update" else "CREATE",
    )
    body["request"]["dryRun"] = case == "a dry run"
    status, answer = await post(served, NAMESPACE_PATH, body)
    assert status == 200
    assert answer["response"] == {"uid": "u-1", "allowed": True}
    expected = {"unplaced": "unplaced", "failure": "failed"}.get(case, "skipped")
    assert places.outcomes == [expected]


@pytest.mark.parametrize("clique", ["A.0", None])
async def test_a_pod_wired_to_its_workloads_domain_gets_the_wiring_first(
    served: tuple[WebhookServer, Places, ssl.SSLContext], clique: str | None
) -> None:
    wiring = ({"op": "add", "path": "/spec/resourceClaims", "value": []},)
    served[1].answer = Placement("team/job", clique, wiring)
    _, body = await post(served, NAMESPACE_PATH, review())
    ops = json.loads(base64.b64decode(body["response"]["patch"]))
    assert ops[0] == wiring[0]
    assert [op["path"] for op in ops[1:]] == (["/spec/affinity"] if clique else [])
    assert served[1].outcomes == ["placed" if clique else "unplaced"]


async def test_what_is_no_admission_review_is_a_bad_request(
    served: tuple[WebhookServer, Places, ssl.SSLContext],
) -> None:
    status, _ = await post(served, NAMESPACE_PATH, {"kind": "Nothing"})
    assert status == 400


async def test_a_renewed_mounted_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    def mount(made: certificates.ServingCertificate) -> None:
        # As the kubelet updates a Secret volume: new files, not the old ones rewritten.
        for name, data in (
            (certificates.CERT_FILE, made.cert_pem),
            (certificates.KEY_FILE, made.key_pem),
        ):
            new = tmp_path / f".{name}.new"
            new.write_bytes(data)
            new.replace(tmp_path / name)

    first, renewed = certificates.issue(["127.0.0.1"]), certificates.issue(["127.0.0.1"])
    mount(first)
    context = certificates.from_directory(str(tmp_path)).ssl_context()
    seen = certificates.files_version(str(tmp_path))
    server = WebhookServer(Places(), "127.0.0.1:0", context)
    await server.start()
    try:

        async def answered(ca: bytes) -> bool:
            trust = ssl.create_default_context(cadata=ca.decode())
            try:
                status, _ = await post((server, Places(), trust), NAMESPACE_PATH, review())
            except aiohttp.ClientConnectorCertificateError:
                return False
            return status == 200

        assert await answered(first.ca_pem)
        mount(renewed)
        assert certificates.files_version(str(tmp_path)) != seen
        certificates.from_directory(str(tmp_path)).load_into(context)
        assert await answered(renewed.ca_pem)
        assert not await answered(first.ca_pem)
    finally:
        await server.stop()
