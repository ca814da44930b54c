import json
from pathlib import Path

import pytest

from computedomain.devcluster.cdi import (
    CdiError,
    ContainerEdits,
    DeviceNode,
    Mount,
    Registry,
    apply,
    load_spec,
    parse_qualified_name,
)

VENDOR = "k8s.compute-domain.nvidia.com"
CLAIM_UID = "1f0e7c1a-0000-4000-8000-000000000001"

# Hand-written, shaped as the compute-domain plugin writes a daemon claim's spec (YAML).
DAEMON_SPEC = f"""\
cdiVersion: 0.5.0
kind: {VENDOR}/claim
devices:
- name: {CLAIM_UID}-daemon-0
  containerEdits:
    env:
    - CLIQUE_ID=cluster-a.1
    - COMPUTE_DOMAIN_UUID=cd-uid
    - COMPUTE_DOMAIN_NAME=imex
    - COMPUTE_DOMAIN_NAMESPACE=team-a
    mounts:
    - hostPath: /var/lib/kubelet/plugins/compute-domain.nvidia.com/domains/cd-uid
      containerPath: /imexd
      options: [rw, nosuid, nodev, bind]
    deviceNodes:
    - path: /dev/nvidia-caps-imex-channels/channel0
      type: c
      major: 234
      minor: 0
      fileMode: 8630
"""

BASE_SPEC = {
    "cdiVersion": "0.6.0",
    "kind": f"{VENDOR}/device",
    "containerEdits": {
        "env": ["NVIDIA_VISIBLE_DEVICES=void", "LEVEL=base"],
        "hooks": [{"hookName": "createContainer", "path": "/bin/hook", "args": ["hook", "x"]}],
        "mounts": [{"hostPath": "/drv/lib", "containerPath": "/usr/lib/x/y"}],
    },
    "devices": [
        {
            "name": "all",
            "containerEdits": {
                "env": ["LEVEL=device"],
                "mounts": [{"hostPath": "/drv", "containerPath": "/usr"}],
            },
        }
    ],
}


def write_specs(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{VENDOR}-claim_{CLAIM_UID}.yaml").write_text(DAEMON_SPEC)
    (root / f"{VENDOR}-device_base.json").write_text(json.dumps(BASE_SPEC))


def test_a_daemon_claims_device_resolves_to_its_edits(tmp_path: Path) -> None:
    write_specs(tmp_path / "cdi")
    registry = Registry([tmp_path / "cdi"])
    assert registry.errors == []
    injected = apply(registry.resolve([f"{VENDOR}/claim={CLAIM_UID}-daemon-0"]), {"PATH": "/bin"})
    assert injected.env == {
        "PATH": "/bin",
        "CLIQUE_ID": "cluster-a.1",
        "COMPUTE_DOMAIN_UUID": "cd-uid",
        "COMPUTE_DOMAIN_NAME": "imex",
        "COMPUTE_DOMAIN_NAMESPACE": "team-a",
    }
    assert injected.mounts == (
        Mount(
            "/var/lib/kubelet/plugins/compute-domain.nvidia.com/domains/cd-uid",
            "/imexd",
            options=("rw", "nosuid", "nodev", "bind"),
        ),
    )
    assert injected.device_nodes == (
        DeviceNode(
            "/dev/nvidia-caps-imex-channels/channel0", type="c", major=234, minor=0, file_mode=8630
        ),
    )


def test_edits_merge_as_a_runtime_merges_them(tmp_path: Path) -> None:
    """Spec edits once before the first of its devices; env replaced in place; mounts one per
    container path and parents first; hooks kept."""
    write_specs(tmp_path / "cdi")
    registry = Registry([tmp_path / "cdi"])
    edits = registry.resolve([f"{VENDOR}/device=all", f"{VENDOR}/claim={CLAIM_UID}-daemon-0"])
    injected = apply(edits, {"LEVEL": "container", "HOME": "/root"})
    assert list(injected.env.items())[:3] == [
        ("LEVEL", "device"),
        ("HOME", "/root"),
        ("NVIDIA_VISIBLE_DEVICES", "void"),
    ]
    assert [m.container_path for m in injected.mounts] == ["/usr", "/imexd", "/usr/lib/x/y"]
    assert [h.path for h in injected.hooks] == ["/bin/hook"]


def test_a_later_entry_replaces_an_earlier_for_the_same_path() -> None:
    edits = ContainerEdits(
        env=("A=1", "B=2", "A=3"),
        device_nodes=(DeviceNode("/dev/x", major=1), DeviceNode("/dev/x", major=2)),
        mounts=(Mount("/a", "/m"), Mount("/b", "/m")),
    )
    injected = apply(edits)
    assert injected.env == {"A": "3", "B": "2"}
    assert injected.device_nodes == (DeviceNode("/dev/x", major=2),)
    assert injected.mounts == (Mount("/b", "/m"),)


def test_an_unknown_device_does_not_resolve(tmp_path: Path) -> None:
    write_specs(tmp_path / "cdi")
    with pytest.raises(CdiError, match=f"^unresolvable CDI devices {VENDOR}/claim=nope$"):
        Registry([tmp_path / "cdi"]).resolve([f"{VENDOR}/claim=nope"])


def test_a_later_directory_wins_and_a_conflict_in_one_does_not_resolve(tmp_path: Path) -> None:
    low, high = tmp_path / "etc", tmp_path / "run"
    write_specs(low)
    high.mkdir()
    spec = DAEMON_SPEC.replace("cluster-a.1", "cluster-b.2")
    (high / "override.yaml").write_text(spec)
    registry = Registry([low, high])
    device = f"{VENDOR}/claim={CLAIM_UID}-daemon-0"
    assert apply(registry.resolve([device])).env["CLIQUE_ID"] == "cluster-b.2"
    (high / "again.yaml").write_text(spec)
    registry.refresh()
    assert registry.errors == [f"{high}: conflicting definitions of {device}"]
    # The conflicting definitions of the higher directory are dropped; the lower one stands.
    assert apply(registry.resolve([device])).env["CLIQUE_ID"] == "cluster-a.1"


def test_invalid_specs_are_reported_not_loaded(tmp_path: Path) -> None:
    root = tmp_path / "cdi"
    root.mkdir()
    (root / "nokind.json").write_text(json.dumps({"cdiVersion": "0.5.0", "devices": []}))
    (root / "notes.txt").write_text("ignored")
    registry = Registry([root])
    assert registry.devices == {}
    assert registry.errors == [f"{root / 'nokind.json'}: kind '' is not vendor/class"]
    (root / "x.yaml").write_text("kind: a.b/c\ndevices: [{name: d}]\n")
    with pytest.raises(CdiError, match="no cdiVersion"):
        load_spec(root / "x.yaml")


def test_qualified_names() -> None:
    assert parse_qualified_name("k8s.compute-domain.nvidia.com/claim=u-1") == (
        "k8s.compute-domain.nvidia.com",
        "claim",
        "u-1",
    )
    for bad in ("nvidia.com/gpu", "gpu=0", "a/b=", "/b=c"):
        with pytest.raises(CdiError):
            parse_qualified_name(bad)
