"""Which NVLink clique a ComputeDomain's workload pods go to (pure; the placement webhook's
decision, computedomain/admission/).

Multi-node NVLink works only within one clique, and NVIDIA's driver does not place a job's pods
(the usual fix, a required pod affinity on ``nvidia.com/gpu.clique``, puts the first pod
anywhere, also where the rest has no room). So, once per ComputeDomain, one clique is chosen:

1. the clique recorded on the CD (``RECORDED_CLIQUE_ANNOTATION``): decided once, kept;
2. else the clique the CD already uses (the nodes it holds, by the node label the kubelet plugin
   sets, or failing those what its daemons report in ``status.nodes``): its pods must join them;
3. else the clique with the most room that fits the job (``spec.numNodes``, or the owning
   StatefulSet's replicas or Job's parallelism when larger): free nodes (domain/capacity.py) less
   those promised to other CDs that recorded a clique and do not hold all their nodes yet (their
   pods are admitted but not placed, so the nodes still look free);
4. else none: the pods are admitted unchanged and the CD says so.

The decision is recorded in an annotation, not in ``status``: NVIDIA's CRD may be the installed
one, and its structural schema prunes any status field it does not name (contract §2.3); metadata
is never pruned.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from computedomain.domain.capacity import NOT_CLIQUES, CliqueCapacity

# Opt-in: this label on a namespace, or this annotation on a ComputeDomain, set to "true".
PLACEMENT_OPT_IN = "placement.computedomain.io/enabled"
# The decision, written once on the CD (with a resourceVersion precondition): a clique, or empty
# when none fitted (then NO_FIT_ANNOTATION says why).
RECORDED_CLIQUE_ANNOTATION = "placement.computedomain.io/clique"
NO_FIT_ANNOTATION = "placement.computedomain.io/unplaced"
# The job size the decision was made for (nodes), so later decisions for other CDs count the
# nodes promised to this one right.
RECORDED_SIZE_ANNOTATION = "placement.computedomain.io/nodes"
# The owners whose size a pod's job takes (apiVersion, kind), and where it reads it.
SIZED_OWNERS = (("apps/v1", "StatefulSet"), ("batch/v1", "Job"))

# Why a clique was chosen (also the reason of the Placed condition and of the Event).
RECORDED = "Recorded"
IN_USE = "CliqueInUse"
MOST_ROOM = "MostFreeNodes"
NO_CLIQUE_FITS = "NoCliqueFits"


# The CD's condition that says what placement decided (the reconciler writes it, from the
# annotations: it owns status). Not one of NVIDIA's, and present only on CDs placed.
CONDITION_PLACED = "Placed"
CLIQUE_CHOSEN = "CliqueChosen"
NOT_PLACED = "NotPlaced"


@dataclass(frozen=True)
class Decision:
    clique: str | None
    reason: str
    message: str
    # The nodes the job was sized at (0: not sized here, the decision was recorded or in use).
    size: int = 0


def opted_in(cd: Mapping[str, Any], namespace_labels: Mapping[str, str]) -> bool:
    annotations = (cd.get("metadata") or {}).get("annotations") or {}
    return "true" in (annotations.get(PLACEMENT_OPT_IN), namespace_labels.get(PLACEMENT_OPT_IN))


def domain_key(cd: Mapping[str, Any]) -> str:
    """How capacity rows name a domain (``CliqueCapacity.domains``)."""
    meta = cd.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def workload_size(owner: Mapping[str, Any] | None) -> int | None:
    """Pods the owning workload runs at once: a StatefulSet's replicas, a Job's parallelism
    (at most its completions). None for anything else."""
    if owner is None:
        return None
    spec = owner.get("spec") or {}
    if owner.get("kind") == "StatefulSet":
        return int(spec.get("replicas", 1) or 0)
    if owner.get("kind") == "Job":
        parallelism = int(spec.get("parallelism", 1) or 0)
        completions = spec.get("completions")
        return parallelism if completions is None else min(parallelism, int(completions))
    return None


def job_size(cd: Mapping[str, Any], workload: int | None = None) -> int:
    """Nodes the job needs (one pod per node): the size recorded with the decision, else the
    larger of ``spec.numNodes`` and the owning workload's size; at least one."""
    annotations = (cd.get("metadata") or {}).get("annotations") or {}
    recorded = str(annotations.get(RECORDED_SIZE_ANNOTATION) or "")
    if recorded.isdigit():
        return max(int(recorded), 1)
    num_nodes = int((cd.get("spec") or {}).get("numNodes") or 0)
    return max(num_nodes, workload or 0, 1)


def recorded_clique(cd: Mapping[str, Any]) -> str | None:
    """The recorded decision: a clique name, "" for "none fitted", None when not decided."""
    annotations = (cd.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(RECORDED_CLIQUE_ANNOTATION)
    return None if value is None else str(value)


def clique_in_use(cd: Mapping[str, Any], rows: Sequence[CliqueCapacity]) -> str | None:
    """The clique holding most of the CD's nodes; else the one its daemons report most."""
    key = domain_key(cd)
    held = Counter(
        {r.clique: r.domains[key] for r in rows if key in r.domains and r.clique not in NOT_CLIQUES}
    )
    if not held:
        for entry in (cd.get("status") or {}).get("nodes") or []:
            if entry.get("cliqueID"):
                held[str(entry["cliqueID"])] += 1
    if not held:
        return None
    return min(held, key=lambda clique: (-held[clique], clique))


def promised(
    rows: Sequence[CliqueCapacity], domains: Iterable[Mapping[str, Any]], but: str
) -> Counter[str]:
    """Per clique, nodes that CDs other than ``but`` recorded there and do not hold yet."""
    held = {r.clique: r.domains for r in rows}
    out: Counter[str] = Counter()
    for cd in domains:
        clique = recorded_clique(cd)
        key = domain_key(cd)
        if not clique or key == but or (cd.get("metadata") or {}).get("deletionTimestamp"):
            continue
        missing = job_size(cd) - held.get(clique, {}).get(key, 0)
        if missing > 0:
            out[clique] += missing
    return out


def decide(
    cd: Mapping[str, Any],
    rows: Sequence[CliqueCapacity],
    domains: Iterable[Mapping[str, Any]],
    workload: int | None = None,
) -> Decision:
    """The clique for ``cd``'s pods (see the module's docstring for the order)."""
    recorded = recorded_clique(cd)
    if recorded:
        return Decision(recorded, RECORDED, f"clique {recorded}, recorded on the ComputeDomain")
    in_use = clique_in_use(cd, rows)
    if in_use:
        return Decision(in_use, IN_USE, f"clique {in_use}, where the ComputeDomain's nodes are")
    size = job_size(cd, workload)
    taken = promised(rows, domains, but=domain_key(cd))
    room = {r.clique: r.free - taken[r.clique] for r in rows if r.clique not in NOT_CLIQUES}
    fits = [clique for clique, n in room.items() if n >= size]
    if fits:
        best = min(fits, key=lambda clique: (-room[clique], clique))
        return Decision(
            best,
            MOST_ROOM,
            f"clique {best}: {room[best]} free nodes not promised to other ComputeDomains, "
            f"the most of the cliques with room for {size}",
            size,
        )
    if not room:
        return Decision(
            None,
            NO_CLIQUE_FITS,
            f"no clique for {size} nodes: no node has an NVLink clique label",
            size,
        )
    largest = min(room, key=lambda clique: (-room[clique], clique))
    return Decision(
        None,
        NO_CLIQUE_FITS,
        f"no clique has {size} free nodes: the most, {max(room[largest], 0)}, are in clique "
        f"{largest}; the pods are admitted without a clique",
        size,
    )


def placed_condition(
    annotations: Mapping[str, str], has_nodes: bool = False
) -> tuple[bool, str, str] | None:
    """(status, reason, message) of the Placed condition; None for a CD not placed. A CD opted
    in by its annotation whose workload holds nodes although nothing was decided had its pods
    admitted while the webhook was not answering (``failurePolicy: Ignore``): said too."""
    clique = annotations.get(RECORDED_CLIQUE_ANNOTATION)
    if clique is None:
        if has_nodes and annotations.get(PLACEMENT_OPT_IN) == "true":
            return (
                False,
                NOT_PLACED,
                (
                    "its workload pods were admitted without a clique: the placement webhook did "
                    "not answer (not installed, unreachable or failing: "
                    'computedomain_placement_admissions_total{outcome="failed"}), and its '
                    "failurePolicy Ignore let them through unchanged"
                ),
            )
        return None
    if clique:
        return (
            True,
            CLIQUE_CHOSEN,
            (
                f"its workload pods are given a required node affinity to NVLink clique {clique} "
                "by the placement webhook"
            ),
        )
    why = annotations.get(NO_FIT_ANNOTATION) or "no clique had room for the job"
    return False, NO_CLIQUE_FITS, f"{why} (decided once, when its first pod was admitted)"
