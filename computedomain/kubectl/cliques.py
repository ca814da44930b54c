"""`kubectl cdom cliques`: the capacity rows (domain/capacity.py) as a table, and whether an
N-node job fits in one clique now."""

from __future__ import annotations

from collections.abc import Sequence

from computedomain.domain.capacity import NOT_CLIQUES, CliqueCapacity, fitting


def table(rows: Sequence[CliqueCapacity]) -> str:
    header = ("CLIQUE", "NODES", "READY", "HELD", "FREE", "DOMAINS")
    lines = [header]
    for row in rows:
        held_by = ",".join(f"{name}({n})" for name, n in sorted(row.domains.items())) or "-"
        lines.append(
            (row.clique, str(row.nodes), str(row.ready), str(row.held), str(row.free), held_by)
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=True))
        + "   "
        + line[-1]
        for line in lines
    )


def fits_message(rows: Sequence[CliqueCapacity], size: int) -> tuple[bool, str]:
    """Whether a ``size``-node job fits in one clique now, and a line that says where (or how
    close the largest clique comes)."""
    found = fitting(rows, size)
    if found:
        best = found[0]
        more = f" (also: {', '.join(r.clique for r in found[1:4])})" if len(found) > 1 else ""
        return True, (
            f"a {size}-node job fits: clique {best.clique} has {best.free} free nodes{more}"
        )
    cliques = [r for r in rows if r.clique not in NOT_CLIQUES]
    if not cliques:
        return False, f"a {size}-node job does not fit: no node has an NVLink clique label"
    largest = max(cliques, key=lambda r: (r.free, r.clique))
    return False, (
        f"a {size}-node job does not fit in one clique now: the most free nodes in one clique "
        f"are {largest.free} (clique {largest.clique})"
    )
