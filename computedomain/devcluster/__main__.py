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
from computedomain.devcluster.cluster import add_fleet_arguments, fleet_spec, populate
from computedomain.devcluster.controlplane import STATE_FILE, ControlPlane, ControlPlaneError

STATE_DIR_ENV = "COMPUTEDOMAIN_DEVCLUSTER_STATE_DIR"
DEFAULT_STATE_DIR = REPO_ROOT / ".devcluster"


def _log(line: str) -> None:
    print(f"devcluster: {line}", file=sys.stderr, flush=True)


def _export_line(kubeconfig: Path) -> str:
    return f"export KUBECONFIG={kubeconfig}"


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
    spec = fleet_spec(args)
    try:
        asyncio.run(populate(cp, spec, args.ready_timeout, log=_log))
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
    add_fleet_arguments(up, racks=4, non_fabric=0)
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
