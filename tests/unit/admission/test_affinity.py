"""The clique requirement joins every node selector term a pod has; nothing else changes."""

from __future__ import annotations

from computedomain.admission.affinity import clique_patch, clique_requirement, with_clique

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def test_a_pod_without_affinity_gets_one_term() -> None:
    assert with_clique(None, "A.0") == {
        "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [clique_requirement("A.0")]}
        ]}}
    }  # fmt: skip


def test_every_ored_term_also_requires_the_clique_and_the_rest_is_kept() -> None:
    zone = {"key": "zone", "operator": "In", "values": ["z1"]}
    affinity = {
        "podAntiAffinity": {"x": 1},
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}],
            REQUIRED: {"nodeSelectorTerms": [
                {"matchExpressions": [zone]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
            ]},
        },
    }  # fmt: skip
    merged = with_clique(affinity, "A.0")
    terms = merged["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"] == [zone, clique_requirement("A.0")]
    assert terms[1]["matchExpressions"] == [clique_requirement("A.0")]
    assert terms[1]["matchFields"][0]["values"] == ["n1"]
    assert merged["podAntiAffinity"] == {"x": 1}
    assert merged["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert affinity["nodeAffinity"][REQUIRED]["nodeSelectorTerms"][0] == {  # type: ignore[index]
        "matchExpressions": [zone]
    }, "the pod's own affinity is not changed in place"


def test_twice_is_once() -> None:
    once = with_clique(None, "A.0")
    assert with_clique(once, "A.0") == once


def test_the_patch_adds_the_whole_affinity() -> None:
    (op,) = clique_patch({"spec": {}}, "A.0")
    assert (op["op"], op["path"]) == ("add", "/spec/affinity")
