"""Builds the kubectl plugin for krew: one Python zipapp, ``kubectl-cdom``, that carries the
plugin and the pure-Python form of every library it imports (aiohttp, yarl, multidict and the
rest fall back to their pure-Python code where their compiled parts are left out), so it runs
on any platform with Python 3.11 or newer and needs no ``pip install``. Then the archive krew
installs from (the zipapp plus the licenses), and the repository's manifest
``manifests/krew/cdom.yaml`` filled in for it: the version, the archive's URL and SHA-256.

    uv run python hack/krew.py --uri https://<where the archive is published> \
        --homepage https://<the project's page> [--out DIR]

Both go to ``--out`` (default ``dist/``): ``kubectl-cdom.tar.gz`` and ``cdom.yaml``, for a
krew index (or ``kubectl krew install --manifest=cdom.yaml --archive=kubectl-cdom.tar.gz``).
The manifest names the same archive for every platform: the zipapp is the same everywhere.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipapp
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "manifests" / "krew" / "cdom.yaml"
# Every compiled speed-up of these libraries has a pure-Python twin they pick when told so.
PURE_PYTHON = {
    "AIOHTTP_NO_EXTENSIONS": "1",
    "MULTIDICT_NO_EXTENSIONS": "1",
    "YARL_NO_EXTENSIONS": "1",
    "FROZENLIST_NO_EXTENSIONS": "1",
    "PROPCACHE_NO_EXTENSIONS": "1",
}
ZIP_EPOCH = 315532800  # 1980-01-01, the earliest time a zip entry holds
MAIN = f'''"""kubectl cdom: run from the zipapp (hack/krew.py)."""
import os
import sys

for _name, _value in {PURE_PYTHON!r}.items():
    os.environ.setdefault(_name, _value)
# The credential resolver runs as a child (python -m ...): it imports from this file too.
_here = os.path.realpath(sys.argv[0])
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_here, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
)
if sys.version_info < (3, 11):
    sys.exit("kubectl cdom needs Python 3.11 or newer on the PATH as python3")

from computedomain.kubectl.main import main

sys.exit(main())
'''


def imported_packages() -> tuple[list[str], list[str]]:
    """The top-level third-party packages and our modules the plugin imports (a fresh
    interpreter, pure-Python mode, so compiled-only modules do not show)."""
    # The plugin, and the credential resolver it runs as a child (python -m ...), which loads
    # the kubeconfig with kubernetes_asyncio (exec plugins, in-cluster) as the controller does.
    probe = (
        "import sys; before = set(sys.modules); import computedomain.kubectl.main\n"
        "import computedomain.runtime.resolve_credentials\n"
        "import kubernetes_asyncio.config, kubernetes_asyncio.client\n"
        "new = set(sys.modules) - before\n"
        "print(' '.join(sorted({m.split('.')[0] for m in new} - set(sys.stdlib_module_names))))\n"
        "print(' '.join(sorted(m for m in new if m.startswith('computedomain'))))\n"
    )
    env = {**PURE_PYTHON, "PATH": ""}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    ).stdout.splitlines()
    # Cython's runtime modules show up beside a compiled part that was still loaded (PyYAML's
    # libyaml binding): not packages, and left out with their compiled parts.
    third_party = [
        name
        for name in out[0].split()
        if name != "computedomain" and not name.startswith(("_cython", "cython_runtime", "__"))
    ]
    return third_party, out[1].split()


def copy_package(name: str, target: Path) -> None:
    """A package's (or module's) Python files, without compiled parts or caches."""
    module = __import__(name)
    origin = Path(module.__file__ or "")
    if origin.name == "__init__.py":
        shutil.copytree(
            origin.parent,
            target / name,
            ignore=shutil.ignore_patterns("*.so", "*.pyd", "*.c", "*.pyx", "__pycache__"),
        )
    else:
        shutil.copy2(origin, target / origin.name)


def licenses(packages: list[str], target: Path) -> None:
    """Each distribution's license files, under licenses/<distribution>/."""
    by_package = metadata.packages_distributions()
    for package in packages:
        for dist_name in by_package.get(package, []):
            dist = metadata.distribution(dist_name)
            for file in dist.files or []:
                if "licen" in file.name.lower() or "copying" in file.name.lower():
                    destination = target / "licenses" / dist_name / file.name
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    destination.write_bytes(Path(str(file.locate())).read_bytes())


def build_zipapp(target: Path) -> Path:
    third_party, ours = imported_packages()
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch)
        for name in third_party:
            copy_package(name, tree)
        for module in ours:
            source = ROOT / Path(*module.split("."))
            if source.is_dir():
                destination = tree / Path(*module.split(".")) / "__init__.py"
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source / "__init__.py", destination)
            else:
                destination = tree / Path(*module.split(".")).with_suffix(".py")
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source.with_suffix(".py"), destination)
        # Our CRDs, where the wheel carries them too (kubectl cdom crds).
        shutil.copytree(ROOT / "crds", tree / "computedomain" / "crds")
        (tree / "__main__.py").write_text(MAIN)
        # The distribution's metadata, as an install leaves it: --version reads it there.
        version = metadata.version("computedomain")
        dist_info = tree / f"computedomain-{version}.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: computedomain\nVersion: {version}\n"
        )
        for path in tree.rglob("*"):  # zip entries carry times: fixed, for the same bytes
            os.utime(path, (ZIP_EPOCH, ZIP_EPOCH))
        app = target / "kubectl-cdom"
        zipapp.create_archive(tree, app, interpreter="/usr/bin/env python3", compressed=True)
        licenses(third_party, target)
    return app


def build_archive(out: Path) -> Path:
    """kubectl-cdom.tar.gz: the zipapp and licenses/, with fixed times and owners so the same
    sources give the same bytes (and the manifest's SHA-256 stays true)."""
    with tempfile.TemporaryDirectory() as scratch:
        staging = Path(scratch)
        build_zipapp(staging)
        archive = out / "kubectl-cdom.tar.gz"
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path in sorted(staging.rglob("*")):
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(staging)))
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                if path.is_file():
                    with path.open("rb") as handle:
                        tar.addfile(info, handle)
                else:
                    tar.addfile(info)
        archive.write_bytes(gzip.compress(buffer.getvalue(), mtime=0))
    return archive


def manifest(version: str, homepage: str, uri: str, sha256: str) -> dict[str, Any]:
    """The repository's manifest (manifests/krew/cdom.yaml) with this release's version, homepage,
    the archive's URL and its SHA-256 on every platform."""
    document: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    document["spec"]["version"] = f"v{version}"
    document["spec"]["homepage"] = homepage
    for platform in document["spec"]["platforms"]:
        platform["uri"], platform["sha256"] = uri, sha256
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where both files go")
    parser.add_argument(
        "--uri", required=True, help="the https URL the archive will be published at"
    )
    parser.add_argument("--homepage", required=True, help="the project's https home page")
    args = parser.parse_args(argv)
    for flag, url in (("--uri", args.uri), ("--homepage", args.homepage)):
        if not url.startswith("https://"):
            parser.error(f"{flag} must be an https URL (krew refuses others), not {url!r}")
    args.out.mkdir(parents=True, exist_ok=True)
    archive = build_archive(args.out)
    sha256 = hashlib.sha256(archive.read_bytes()).hexdigest()
    filled = manifest(metadata.version("computedomain"), args.homepage, args.uri, sha256)
    (args.out / "cdom.yaml").write_text(yaml.safe_dump(filled, sort_keys=False, width=100))
    print(archive)
    print(args.out / "cdom.yaml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
