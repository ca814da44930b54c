"""NOTES.txt, what `helm install` prints: every command it gives names real objects.

`helm template` does not render NOTES.txt and `helm install --dry-run` needs a cluster, so the
chart is copied with NOTES.txt under another name, which `helm template --debug` prints (it is
not YAML, so helm also reports a parse error on stderr, which is expected here)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.unit.helm.support import CHART, run_helm, template_args

NOTES = "notes.txt"


def render_notes(helm: Path, copy_to: Path, *sets: str) -> str:
    chart = copy_to / CHART.name
    shutil.copytree(CHART, chart)
    (chart / "templates" / "NOTES.txt").rename(chart / "templates" / NOTES)
    args = template_args(namespace="nvidia-dra-driver-gpu", sets=sets)
    args[2] = str(chart)  # template <release> <chart>
    result = run_helm(helm, *args, "--show-only", f"templates/{NOTES}", "--debug")
    source = f"# Source: {CHART.name}/templates/{NOTES}\n"
    assert source in result.stdout, result.stderr[-2000:]
    return result.stdout.split(source, 1)[1]


@pytest.mark.parametrize(
    ("lease_lock_name", "lease"),
    [
        ("computedomain-controller", "computedomain-controller"),
        # Empty: NVIDIA's Lease, so the two controllers share one (the swap's install).
        ("", "dra-driver-nvidia-gpu-controller"),
    ],
)
def test_the_lease_command_names_the_lease_the_controller_leads_on(
    helm: Path, tmp_path: Path, lease_lock_name: str, lease: str
) -> None:
    notes = render_notes(
        helm, tmp_path, f"controller.leaderElection.leaseLockName={lease_lock_name}"
    )
    commands = re.findall(r"kubectl -n (\S+) get lease (\S+)", notes)
    assert commands == [("nvidia-dra-driver-gpu", lease)], notes
