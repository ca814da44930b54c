"""The settings and NVIDIA's inert flags as Markdown tables: docs/operations.md carries them,
and tests/unit/test_config.py keeps them true."""

from __future__ import annotations

from computedomain.config.inert import INERT_FLAGS
from computedomain.config.table import SETTINGS


def settings_markdown() -> str:
    """Every setting as a Markdown table (docs/operations.md carries it; a test keeps it true)."""
    rows = ["| Flag | Environment | Default | Accepts | Meaning |", "|---|---|---|---|---|"]
    for row in SETTINGS:
        flags = ", ".join(f"`{flag}`" for flag in row.flags)
        envs = " or ".join(f"`{env}`" for env in (row.env, *row.fallback_env))
        default = f"`{row.default}`" if row.default else "(empty)"
        accepts = row.check.accepts if row.check else "any"
        meaning = row.help.replace("|", "\\|")
        rows.append(f"| {flags} | {envs} | {default} | {accepts} | {meaning} |")
    return "\n".join(rows) + "\n"


def inert_flags_markdown() -> str:
    """NVIDIA's flags accepted without effect, as a Markdown table (docs/operations.md)."""
    rows = ["| Flag | Environment | Accepts | NVIDIA's meaning, and why it does nothing here |",
            "|---|---|---|---|"]  # fmt: skip
    for row in INERT_FLAGS:
        rows.append(f"| `{row.flag}` | `{row.env}` | {row.accepts} | {row.help} |")
    return "\n".join(rows) + "\n"
