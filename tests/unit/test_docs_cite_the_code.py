"""What README.md, docs/operations.md and docs/runbooks.md cite exists in the code: the files
they name, the flags of our commands (controller, `kubectl cdom`, hack/ scripts), environment
variables, metrics, alerts and `kubectl cdom` subcommands; and the modules and definitions
docs/design.md's map names. Other tests go the other way (every setting, metric and alert is
documented); this one catches a doc left behind by a rename.

Citations are read from code: inline `code` spans and fenced blocks. A flag counts as ours when
the command it follows is ours; a flag cited alone must be one of any of our commands or of
NVIDIA's inert flags."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
import yaml

from computedomain.config import INERT_FLAGS, SETTINGS
from computedomain.config import build_parser as controller_parser
from computedomain.kubectl.main import build_parser as kubectl_parser
from tests.kit.promql import exported_label_names, exported_metric_names

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/operations.md", "docs/runbooks.md")
RULES = ROOT / "manifests" / "prometheus" / "prometheus_rule.yaml"

CONTROLLER = ("computedomain-controller", "compute-domain-controller")
KUBECTL_PLUGIN = ("kubectl cdom", "kubectl computedomain", "kubectl-cdom", "kubectl-computedomain")
# The top of the tree: a word starting with one of these is a path of ours.
TOP = ("computedomain/", "crds/", "manifests/", "tests/", "hack/", "docs/", ".ci/")
TOP_FILES = ("Dockerfile", "pyproject.toml", "uv.lock", "README.md", "LICENSE", "CHANGELOG.md")
# Flags cited alone that belong to other tools, each where the docs use it.
OTHER_TOOLS_FLAGS = frozenset(
    {
        "--set",  # helm install/upgrade --set
        "--previous",  # kubectl logs --previous
        "-f",  # kubectl apply -f
        "-o",  # kubectl get -o
        "--event-ttl",  # the kube-apiserver's, which Events expire by
        "--ver",  # shown as refused: Go's flag package expands no prefix
        "-name",  # Go's flag syntax, spelled generically
    }
)
# Named as what a metric of ours replaced.
REPLACED_METRICS = frozenset({"computedomain_clique_nodes_in_use"})
# Environment variables that are the platform's, not read by our code.
PLATFORM_ENV = frozenset({"KUBECONFIG"})
# NVIDIA's kubelet plugin's (v0.5): whether it owns the clique label.
NVIDIA_ENV = frozenset({"GPU_CLIQUE_LABEL_ENABLED"})
# ComputeDomain... words that are kinds, not alerts.
KINDS = frozenset({"ComputeDomain", "ComputeDomainClique", "ComputeDomainCliques"})
METRIC_PREFIXES = (
    "computedomain_", "controller_runtime_", "workqueue_", "rest_client_", "leader_election_",
    "event_recorder_", "process_", "python_",
)  # fmt: skip
FLAG = re.compile(r"(?<![\w$/.=-])(--?[A-Za-z][\w-]*)")
ENV = re.compile(r"(?<![\w$.-])\$?\{?([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\}?(?![\w-])")
METRIC = re.compile(rf"(?<![\w./])((?:{'|'.join(METRIC_PREFIXES)})[a-z0-9_]*[a-z0-9])\b")


def code_of(doc: str) -> list[str]:
    """Inline code spans and the lines of fenced blocks, in order."""
    found: list[str] = []
    fenced = False
    for line in (ROOT / doc).read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            found.append(line)
        else:
            found += re.findall(r"`([^`\n]+)`", line)
    return found


def commands(code: str) -> Iterator[list[str]]:
    """The words of each command in a line of shell: split at pipes, `&&`, `;` and `$(`, with
    leading `$ `, environment assignments and `uv run` dropped."""
    for part in re.split(r"\|\|?|&&|;|\$\(|\)", code):
        try:
            words = shlex.split(part, comments=True)
        except ValueError:
            words = part.split()
        while words and (re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]) or words[0] == "$"):
            words = words[1:]
        if words[:2] == ["uv", "run"]:
            words = [w for w in words[2:] if w != "--locked"]
        if words:
            yield words


def options(parser: argparse.ArgumentParser) -> set[str]:
    found = {s for action in parser._actions for s in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= options(sub)
    return found


def subcommands(parser: argparse.ArgumentParser) -> set[str]:
    return {
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    }


@cache
def script_flags(script: str) -> frozenset[str]:
    """Flags a hack/ script accepts: the ones its source spells (case patterns, argparse), and
    those of the hack/ Python script it hands its arguments to."""
    text = (ROOT / script).read_text()
    if script.endswith(".sh"):
        named = set(re.findall(r"(?<![\w/.-])hack/[\w/]+\.py\b", text))
        text += "".join((ROOT / runs).read_text() for runs in named if (ROOT / runs).is_file())
    return frozenset(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text))


def our_flags() -> dict[str, set[str]]:
    return {
        "controller": options(controller_parser({})),
        "kubectl": options(kubectl_parser()),
    }


def cited_flags(doc: str) -> Iterator[tuple[str, str, str]]:
    """(command, flag, the code it is cited in) for our commands; ("", flag, code) alone."""
    for code in code_of(doc):
        if re.fullmatch(r"--?[A-Za-z][\w-]*(?:[ =].*)?", code):
            yield "", code.split()[0].split("=")[0], code
            continue
        for words in commands(code):
            line = " ".join(words)
            command = next(
                (c for c in (*CONTROLLER, *KUBECTL_PLUGIN) if line.startswith(c + " ")), None
            )
            if command is None and words[0].startswith("hack/") and (ROOT / words[0]).is_file():
                command = words[0]
            if command is None:
                continue
            for word in words[len(command.split()) :]:
                if FLAG.fullmatch(word.split("=")[0]):
                    yield command, word.split("=")[0], code


@pytest.mark.parametrize("doc", DOCS)
def test_every_file_it_names_exists(doc: str) -> None:
    missing = set()
    text = (ROOT / doc).read_text()
    named = [
        word
        for code in code_of(doc)
        for word in re.findall(r"[\w./*<>{}-]+", code)
        if word.startswith(TOP) or word in TOP_FILES
    ]
    links = re.findall(r"\]\((?!https?:|#)([^)#\s]+)", text)
    named += [str((ROOT / doc).parent.joinpath(link).resolve().relative_to(ROOT)) for link in links]
    for word in named:
        path = word.split("::")[0].rstrip(".,:")
        if re.search(r"[<>{}]", path):  # a pattern: <name>.yaml
            path = re.split(r"[<>{}]", path)[0].rsplit("/", 1)[0]
        if not list(ROOT.glob(path)) and not (ROOT / path).exists():
            missing.add(word)
    assert not missing, f"{doc} names files that do not exist: {sorted(missing)}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_flag_of_ours_it_cites_is_accepted(doc: str) -> None:
    flags = our_flags()
    anywhere = flags["controller"] | flags["kubectl"] | {f.flag for f in INERT_FLAGS}
    hack = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "hack").rglob("*") if p.is_file())
    anywhere |= {flag for script in hack for flag in script_flags(script)}
    unknown = []
    for command, flag, code in cited_flags(doc):
        known: set[str] | frozenset[str]
        if command in CONTROLLER:
            known = flags["controller"]
        elif command in KUBECTL_PLUGIN:
            known = flags["kubectl"]
        elif command:
            known = script_flags(command) | {"-h", "--help"}
        else:
            known = anywhere | OTHER_TOOLS_FLAGS
        if flag not in known:
            unknown.append(f"{flag} ({command or 'alone'}: `{code}`)")
    assert not unknown, f"{doc} cites flags that no such command accepts: {unknown}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_kubectl_plugin_command_it_cites_exists(doc: str) -> None:
    parser = kubectl_parser()
    known = subcommands(parser)
    # The global flags that take a value: the word after one is its value, not the command.
    valued = {s for a in parser._actions if a.nargs != 0 for s in a.option_strings}
    unknown = []
    for code in code_of(doc):
        for words in commands(code):
            line = " ".join(words)
            for plugin in KUBECTL_PLUGIN:
                if not line.startswith(plugin + " "):
                    continue
                rest = line[len(plugin) :].split()
                while rest and rest[0].startswith("-"):
                    flag = rest.pop(0)
                    if flag in valued and rest:
                        rest.pop(0)
                placeholder = re.fullmatch(r"<.*>|\.\.\.|…", rest[0]) if rest else True
                if rest and rest[0] not in known and not placeholder:
                    unknown.append(f"{rest[0]} (`{code}`)")
    assert not unknown, f"{doc} cites `kubectl cdom` commands that do not exist: {unknown}"


@cache
def environment_the_code_reads() -> frozenset[str]:
    """Our settings (with NVIDIA's spellings) and NVIDIA's inert ones; what Python reads from
    os.environ; what our shell scripts expand; what our manifests and the daemon's pod template
    set. Also the product's module-level constants, which the docs cite in the same case."""
    names = {s.env for s in SETTINGS} | {f.env for f in INERT_FLAGS if f.env}
    names |= {alias for s in SETTINGS for alias in s.fallback_env}
    for path in ROOT.glob("computedomain/**/*.py"):
        names |= set(re.findall(r"^([A-Z][A-Z0-9_]+)\s*[:=]", path.read_text(), re.M))
    for path in [*ROOT.glob("computedomain/**/*.py"), *ROOT.glob("hack/**/*.py"),
                 *ROOT.glob("tests/**/*.py")]:  # fmt: skip
        text = path.read_text()
        names |= set(re.findall(r"environ(?:\.get)?[(\[]\s*[\"']([A-Z][A-Z0-9_]+)", text))
        names |= set(re.findall(r"getenv\(\s*[\"']([A-Z][A-Z0-9_]+)", text))
        if "computedomain/api/" in str(path):  # the daemon's environment, by name
            names |= set(re.findall(r"[\"']([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)[\"']", text))
    shell = [ROOT / ".ci" / "run", *ROOT.glob("hack/**/*.sh")]
    for path in shell:
        names |= set(re.findall(r"\$\{?([A-Z][A-Z0-9_]+)", path.read_text()))
    for path in ROOT.glob("manifests/**/*.yaml"):
        names |= set(re.findall(r"-\s+name:\s+([A-Z][A-Z0-9_]+)\s*$", path.read_text(), re.M))
    return frozenset(names | PLATFORM_ENV | NVIDIA_ENV)


@pytest.mark.parametrize("doc", DOCS)
def test_every_environment_variable_it_cites_is_read(doc: str) -> None:
    code = code_of(doc)
    # A doc's own shell variables (the runbooks' `CTRL_NS=...`, then `$CTRL_NS`): set at the
    # start of a line and expanded later, so a setting shown as `NAME=value` is still checked.
    assigned = {m for line in code for m in re.findall(r"^\s*([A-Z][A-Z0-9_]+)=", line)}
    own = {name for name in assigned if any(f"${name}" in line for line in code)}
    known = environment_the_code_reads() | own
    cited = {name for line in code for name in ENV.findall(line)}
    unknown = sorted(cited - known)
    assert not unknown, f"{doc} cites environment variables nothing reads: {unknown}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_metric_it_cites_is_exported(doc: str) -> None:
    exported = exported_metric_names() | REPLACED_METRICS | exported_label_names()
    suffixes = ("_bucket", "_sum", "_count", "_created")
    unknown = set()
    for code in code_of(doc):
        for name in METRIC.findall(code):
            if name in exported or any(name.removesuffix(s) in exported for s in suffixes):
                continue
            unknown.add(name)
    assert not unknown, f"{doc} cites metrics the controller does not export: {sorted(unknown)}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_alert_it_names_is_a_rule(doc: str) -> None:
    rules = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"] for g in rules["spec"]["groups"] for r in g["rules"] if "alert" in r}
    named = set(re.findall(r"\b(ComputeDomain[A-Z][A-Za-z]+)\b", (ROOT / doc).read_text()))
    unknown = sorted(named - alerts - KINDS)
    assert not unknown, f"{doc} names alerts that are not in {RULES.name}: {unknown}"


def design_map() -> list[str]:
    """The rows of docs/design.md's map (one CD from its watch event to its status write)."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## The map", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ") and ".py" in line]


def test_the_design_map_names_modules_and_definitions_that_exist() -> None:
    """Each `module.py` in the map is a module of ours, and each name cited after it in the
    same cell (`Class`, `function`, `Class.method`) is defined there: the map follows renames."""
    rows = design_map()
    assert len(rows) >= 10, "the map lost its rows"
    wrong = []
    for row in rows:
        for cell in row.split("|"):
            module: Path | None = None
            for span in re.findall(r"`([^`]+)`", cell):
                if span.endswith(".py"):
                    module = ROOT / "computedomain" / span
                    if not module.is_file():
                        wrong.append(f"{span}: no such module")
                        module = None
                elif module is not None and re.fullmatch(r"[A-Za-z_][\w.]*", span):
                    source = module.read_text()
                    for name in span.split("."):
                        if not re.search(rf"^\s*(?:async def|def|class) {name}\b", source, re.M):
                            wrong.append(f"{module.relative_to(ROOT)}: no {name}")
    assert not wrong, f"docs/design.md's map names what does not exist: {wrong}"


def test_every_benchmark_result_docs_benchmark_cites_is_committed() -> None:
    """docs/benchmark.md's figures come with their JSONs (docs/benchmark-results/): a result
    cited and not committed, or left behind by a move, fails here."""
    text = (ROOT / "docs" / "benchmark.md").read_text()
    cited = set(re.findall(r"docs/benchmark-results/[\w.-]+\.json", text))
    assert len(cited) >= 20, "docs/benchmark.md cites fewer results than it did"
    missing = sorted(path for path in cited if not (ROOT / path).is_file())
    assert not missing, f"docs/benchmark.md cites results that are not committed: {missing}"
