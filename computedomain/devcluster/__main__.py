"""computedomain-devcluster: run a local control plane with a fake GB200 fleet.

computedomain-devcluster up --racks 4 --non-fabric 2   # start detached, create the fleet
eval "$(computedomain-devcluster env)"                 # point kubectl / the controller at it
computedomain-devcluster down                          # stop every component by PID
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

from computedomain.devcluster.assets import REPO_ROOT, AssetsUnavailableError, find_assets
from computedomain.devcluster.clients import api_client_from_kubeconfig
from computedomain.devcluster.controlplane import STATE_FILE, ControlPlane, ControlPlaneError
from computedomain.devcluster.crds import CRD_DIR, apply_crds
from computedomain.sim.fleet import FleetSpec, create_fleet, wait_nodes_ready

STATE_DIR_ENV = "COMPUTEDOMAIN_DEVCLUSTER_STATE_DIR"
DEFAULT_STATE_DIR = REPO_ROOT / ".devcluster"


def _log(line: str) -> None:
    print(f"devcluster: {line}", file=sys.stderr, flush=True)


def _export_line(kubeconfig: Path) -> str:
    return f"export KUBECONFIG={kubeconfig}"


async def populate(cp: ControlPlane, spec: FleetSpec, ready_timeout: float) -> dict[str, float]:
    """Apply the CRDs (if ``crds/`` has any), create the fleet and wait for Ready nodes."""
    timings: dict[str, float] = {}
    api = await api_client_from_kubeconfig(cp.kubeconfig)
    try:
        t = time.monotonic()
        crds = await apply_crds(api, CRD_DIR)
        timings["crds"] = time.monotonic() - t
        _log(f"{len(crds)} CRDs Established in {timings['crds']:.1f}s")
        t = time.monotonic()
        names = await create_fleet(api, spec)
        timings["fleet_create"] = time.monotonic() - t
        _log(
            f"created {len(names)} nodes + ResourceSlices ({spec.racks} racks x "
            f"{spec.nodes_per_rack}, {spec.non_fabric} non-fabric) "
            f"in {timings['fleet_create']:.1f}s"
        )
        t = time.monotonic()
        await wait_nodes_ready(api, names, ready_timeout)
        timings["fleet_ready"] = time.monotonic() - t
        _log(f"all {len(names)} nodes Ready after another {timings['fleet_ready']:.1f}s")
    finally:
        await api.close()
    return timings


def cmd_up(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    if (state_dir / STATE_FILE).exists():
        previous = ControlPlane.attach(state_dir)
        if any(previous.running().values()):
            _log(f"already running from {state_dir}; run `down` first")
            print(_export_line(previous.kubeconfig))
            return 1
        previous.stop()  # stale state from a crash: clean up its data dir
    begin = time.monotonic()
    try:
        assets = find_assets()
        for name, version in assets.versions().items():
            _log(f"{name}: {version} ({assets.sources[name]})")
        cp = ControlPlane.start(state_dir, assets=assets, detach=True, log=_log)
    except (AssetsUnavailableError, ControlPlaneError) as error:
        _log(f"failed: {error}")
        return 1
    spec = FleetSpec(
        racks=args.racks,
        nodes_per_rack=args.nodes_per_rack,
        non_fabric=args.non_fabric,
        seed=args.seed,
    )
    try:
        asyncio.run(populate(cp, spec, args.ready_timeout))
    except BaseException as error:
        _log(f"fleet setup failed ({error!r}); stopping the control plane")
        cp.stop()
        return 1
    _log(
        f"up in {time.monotonic() - begin:.1f}s total "
        f"(control plane {cp.timings.get('total', 0):.1f}s); logs in {state_dir / 'logs'}"
    )
    print(_export_line(cp.kubeconfig))
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    if not (state_dir / STATE_FILE).exists():
        _log(f"nothing to stop ({state_dir / STATE_FILE} does not exist)")
        return 0
    cp = ControlPlane.attach(state_dir)
    cp.stop()
    _log("stopped")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    kubeconfig = args.state_dir / "admin.kubeconfig"
    if not (args.state_dir / STATE_FILE).exists():
        _log(f"not running (no {args.state_dir / STATE_FILE}); run `up` first")
        return 1
    print(_export_line(kubeconfig))
    return 0


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="computedomain-devcluster",
        description=(
            "Local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, "
            "kube-scheduler, kwok) with a fake fleet of EKS P6e-GB200 nodes. Binaries are "
            "found via TEST_ASSET_<NAME>, KUBEBUILDER_ASSETS, /usr/local/kubebuilder/bin, "
            "or built once by hack/controlplane/build.sh."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    state_default = Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir",
        type=Path,
        default=state_default,
        help=f"directory for PIDs, ports, PKI, kubeconfigs and logs (env {STATE_DIR_ENV})",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser(
        "up",
        parents=[common],
        help="start the control plane detached and create the fleet",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    up.add_argument(
        "--racks", type=_non_negative, default=4, help="NVL72 racks (one NVLink clique each)"
    )
    up.add_argument(
        "--nodes-per-rack", type=int, default=18, help="p6e-gb200.36xlarge nodes per rack"
    )
    up.add_argument(
        "--non-fabric",
        type=_non_negative,
        default=0,
        help="extra GPU nodes outside any NVLink domain (no nvidia.com/gpu.clique label)",
    )
    up.add_argument("--seed", type=int, default=0, help="seed for cluster UUIDs and network IDs")
    up.add_argument(
        "--ready-timeout",
        type=float,
        default=120.0,
        help="seconds to wait for all nodes to turn Ready",
    )
    up.set_defaults(func=cmd_up)
    down = commands.add_parser(
        "down", parents=[common], help="stop every component by PID and remove etcd data"
    )
    down.set_defaults(func=cmd_down)
    env = commands.add_parser(
        "env", parents=[common], help="print `export KUBECONFIG=...` for the running cluster"
    )
    env.set_defaults(func=cmd_env)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.state_dir = args.state_dir.resolve()
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
