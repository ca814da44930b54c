"""The krew package of `kubectl cdom` (hack/krew.py): the archive holds one zipapp and the
licenses of what it carries, the manifest is the repository's manifests/krew/cdom.yaml filled in for
that archive, and the zipapp runs on a bare interpreter (no site-packages, no checkout), its
credential resolver child included."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from computedomain.kubectl.shipped import crds as crds_stream
from tests.kit.release import PROJECT_VERSION

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "manifests" / "krew" / "cdom.yaml"
URI = "https://example.org/releases/v0.1.0/kubectl-cdom.tar.gz"
HOMEPAGE = "https://example.org/computedomain"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("krew")
    subprocess.run(
        [sys.executable, str(ROOT / "hack" / "krew.py"), "--out", str(out),
         "--uri", URI, "--homepage", HOMEPAGE],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return out


def test_the_manifest_is_the_template_filled_in_for_the_archive(built: Path) -> None:
    archive = built / "kubectl-cdom.tar.gz"
    manifest = yaml.safe_load((built / "cdom.yaml").read_text())
    template = yaml.safe_load(TEMPLATE.read_text())
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    assert manifest["metadata"] == template["metadata"] == {"name": "cdom"}
    assert manifest["spec"]["version"] == f"v{PROJECT_VERSION}"
    assert manifest["spec"]["homepage"] == HOMEPAGE
    sha256 = hashlib.sha256(archive.read_bytes()).hexdigest()
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "kubectl-cdom" in names
    assert any(name.startswith("licenses/aiohttp/") for name in names)
    platforms = manifest["spec"]["platforms"]
    assert {(p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"])
            for p in platforms} >= {("linux", "amd64"), ("linux", "arm64")}  # fmt: skip
    for filled, blank in zip(platforms, template["spec"]["platforms"], strict=True):
        assert (filled["uri"], filled["sha256"]) == (URI, sha256)
        assert {**filled, "uri": "", "sha256": ""} == {**blank, "uri": "", "sha256": ""}
        assert filled["bin"] == "kubectl-cdom"
        assert {f["from"].removesuffix("/*") for f in filled["files"]} <= {
            name.split("/")[0] for name in names
        }


def test_a_second_build_gives_the_same_bytes(built: Path, tmp_path: Path) -> None:
    """The manifest's SHA-256 is of a reproducible archive: built again, it matches."""
    subprocess.run(
        [sys.executable, str(ROOT / "hack" / "krew.py"), "--out", str(tmp_path),
         "--uri", URI, "--homepage", HOMEPAGE],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    again = (tmp_path / "kubectl-cdom.tar.gz").read_bytes()
    assert again == (built / "kubectl-cdom.tar.gz").read_bytes()


def test_the_zipapp_runs_on_a_bare_interpreter(built: Path, tmp_path: Path) -> None:
    with tarfile.open(built / "kubectl-cdom.tar.gz") as tar:
        tar.extract("kubectl-cdom", tmp_path, filter="data")
    # A virtual environment with nothing installed: neither the plugin nor the resolver child
    # it starts can import anything the zipapp does not carry.
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run(
        [base, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=120
    )
    python = tmp_path / "bare" / "bin" / "python3"
    bare = {"PATH": os.pathsep.join([str(python.parent), "/usr/bin", "/bin"])}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), str(tmp_path / "kubectl-cdom"), *args],
            capture_output=True, text=True, timeout=120, env=bare, cwd=tmp_path,
        )  # fmt: skip

    empty = subprocess.run(
        [str(python), "-c", "import aiohttp"], capture_output=True, timeout=60, env=bare
    )
    assert empty.returncode != 0, "the bare environment must not have the libraries"
    helped = run("--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: kubectl computedomain")
    versioned = run("--version")
    assert versioned.stdout == f"kubectl-cdom {metadata.version('computedomain')}\n"
    # The credential resolver runs as a child from the zipapp too: it reads the kubeconfig.
    missing = run("--kubeconfig", str(tmp_path / "absent"), "cliques")
    assert missing.returncode == 3, missing.stderr
    assert missing.stderr.startswith("error: kubeconfig"), missing.stderr
    # Our CRDs from the zipapp, for the fixes that apply them without a checkout.
    printed = run("crds")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == crds_stream(), "the zipapp's CRDs are not crds/"
