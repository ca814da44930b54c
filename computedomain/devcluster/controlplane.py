"""A real local control plane: etcd, kube-apiserver, KCM, scheduler and kwok as child processes.

Typical use::

    with ControlPlane.start() as cp:        # or ControlPlane.start(workdir=Path(...))
        ...cp.kubeconfig, cp.server, cp.ca_file...

``USE_EXISTING_CLUSTER=true`` makes :meth:`ControlPlane.start` start nothing and target the
cluster named by ``KUBECONFIG`` (default ``~/.kube/config``) instead. A plain ``KUBECONFIG``
alone does not switch, because shells and CI commonly export one for unrelated clusters.

Every run gets fresh ports, a fresh PKI and a fresh etcd data dir (on tmpfs when available):
reused etcd data brings back stale objects and leases. Each component logs to
``<workdir>/logs/<component>.log``; ``<workdir>/state.json`` records PIDs and ports so a
detached control plane can be stopped later by PID (:meth:`ControlPlane.attach`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import socket
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from computedomain.devcluster.assets import Assets, find_assets
from computedomain.devcluster.components import (
    AUDIT_LOG,
    AUDIT_POLICY,
    KWOK_NODE_ANNOTATION,
    KWOK_NODE_ANNOTATION_VALUE,
    apiserver_args,
    etcd_args,
    kcm_args,
    kwok_args,
    kwok_configuration_yaml,
    scheduler_args,
)
from computedomain.devcluster.components import ControlPlaneError as ControlPlaneError
from computedomain.devcluster.pki import ClientCert, generate_pki, kubeconfig_yaml
from computedomain.devcluster.processes import (
    STOP_GRACE_SECONDS,
    ChildProcess,
    pid_runs,
    spawn,
    tail,
)

STATE_FILE = "state.json"
ETCD_DIR_PREFIX = "computedomain-etcd-"
OWNER_FILE = "etcd.pid"
# Start order; stop runs it backwards.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def use_existing_cluster(env: dict[str, str] | None = None) -> bool:
    env = dict(os.environ) if env is None else env
    return env.get("USE_EXISTING_CLUSTER", "").lower() == "true"


@dataclass
class ControlPlane:
    kubeconfig: Path
    server: str
    ca_file: Path | None
    workdir: Path | None = None
    owned: bool = False
    # Seconds per start step (etcd, kube-apiserver, controllers, kwok, total).
    timings: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    _processes: list[ChildProcess] = field(default_factory=list)
    # How each component was started (restart starts it again the same way), and its ports.
    _argv: dict[str, list[str]] = field(default_factory=dict)
    _ports: dict[str, int] = field(default_factory=dict)
    _data_dir: Path | None = None
    _remove_workdir: bool = False

    @property
    def audit_log(self) -> Path | None:
        """The apiserver's audit log (JSON lines, see AUDIT_POLICY); None for a foreign cluster."""
        return self.workdir / "logs" / AUDIT_LOG if self.workdir is not None else None

    # ---- construction -------------------------------------------------------------------

    @classmethod
    def existing(cls, kubeconfig: Path | None = None) -> ControlPlane:
        """Target a running cluster; start nothing, stop nothing."""
        path = kubeconfig or Path(
            os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
            or Path.home() / ".kube" / "config"
        )
        if not path.is_file():
            raise ControlPlaneError(f"kubeconfig {path} not found")
        config = yaml.safe_load(path.read_text())
        contexts = {c["name"]: c["context"] for c in config.get("contexts", [])}
        clusters = {c["name"]: c["cluster"] for c in config.get("clusters", [])}
        current = config.get("current-context") or next(iter(contexts), None)
        if current is None or current not in contexts:
            raise ControlPlaneError(f"kubeconfig {path} has no usable current context")
        cluster = clusters[contexts[current]["cluster"]]
        ca = cluster.get("certificate-authority")
        return cls(kubeconfig=path, server=cluster["server"], ca_file=Path(ca) if ca else None)

    @classmethod
    def start(
        cls,
        workdir: Path | None = None,
        *,
        assets: Assets | None = None,
        timeout: float | None = None,
        detach: bool = False,
        log: Callable[[str], None] | None = None,
        node_heartbeat_s: float | None = None,
    ) -> ControlPlane:
        """Start all five components (or attach to an existing cluster, see module doc).

        ``workdir`` holds PKI, kubeconfigs, logs and state; a temporary directory is made and
        removed on stop when it is not given. ``detach`` keeps the children alive after this
        process exits (for the ``up`` command); otherwise they die with it. Without
        ``detach``, call this from a long-lived thread (e.g. the main thread): the kernel's
        parent-death signal fires when the *thread* that started the children exits.
        ``node_heartbeat_s``: mean seconds between a kwok node's status writes (see
        ``kwok_configuration_yaml``; default kwok's stage, 20-25 s).
        """
        if use_existing_cluster():
            return cls.existing()
        if timeout is None:
            timeout = float(os.environ.get("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT", "60"))
        assets = assets or find_assets()
        remove_workdir = workdir is None
        workdir = workdir or Path(tempfile.mkdtemp(prefix="computedomain-devcluster-"))
        workdir.mkdir(parents=True, exist_ok=True)
        cp = cls(
            kubeconfig=workdir / "admin.kubeconfig",
            server="",
            ca_file=workdir / "pki" / "ca.crt",
            workdir=workdir,
            owned=True,
            _remove_workdir=remove_workdir,
        )
        try:
            cp._boot(assets, timeout, detach, log or (lambda _line: None), node_heartbeat_s)
        except BaseException:
            cp.stop()
            raise
        return cp

    @classmethod
    def attach(cls, workdir: Path) -> ControlPlane:
        """Re-open a control plane started with ``detach=True`` from its ``state.json``."""
        state = json.loads((workdir / STATE_FILE).read_text())
        return cls(
            kubeconfig=Path(state["kubeconfig"]),
            server=state["server"],
            ca_file=Path(state["ca_file"]),
            workdir=workdir,
            owned=True,
            timings=state.get("timings", {}),
            _processes=[
                ChildProcess(name, pid, workdir / "logs" / f"{name}.log")
                for name, pid in state["pids"].items()
            ],
            _data_dir=Path(state["data_dir"]) if state.get("data_dir") else None,
        )

    # ---- start --------------------------------------------------------------------------

    def _boot(
        self,
        assets: Assets,
        timeout: float,
        detach: bool,
        log: Callable[[str], None],
        node_heartbeat_s: float | None = None,
    ) -> None:
        assert self.workdir is not None
        begin = time.monotonic()
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        data_root = _tmpfs_or(self.workdir)
        sweep_stale_etcd_dirs(data_root)
        self._data_dir = Path(tempfile.mkdtemp(prefix=ETCD_DIR_PREFIX, dir=data_root))
        pki = generate_pki(self.workdir / "pki")
        ports = {
            name: free_port() for name in ("etcd", "etcd-peer", "apiserver", "kcm", "scheduler")
        }
        self.server = f"https://127.0.0.1:{ports['apiserver']}"
        self._ports = ports
        self._write_state(ports)

        def start(name: str, args: list[str]) -> None:
            argv = [str(assets[name]), *args]
            self._argv[name] = argv
            log_path = logs / f"{name}.log"
            self._processes.append(spawn(name, argv, log_path, detach=detach, cwd=self.workdir))
            self._write_state(ports)

        def step(name: str, started: float) -> None:
            self.timings[name] = round(time.monotonic() - started, 2)
            log(f"{name} ready in {self.timings[name]:.1f}s")

        t = time.monotonic()
        start("etcd", etcd_args(self._data_dir / "data", ports["etcd"], ports["etcd-peer"]))
        # Lets a later run sweep this tmpfs dir if we die without stopping (memory-backed).
        (self._data_dir / OWNER_FILE).write_text(str(self._processes[-1].pid))
        etcd_health = f"http://127.0.0.1:{ports['etcd']}/health"
        self._wait(lambda: _http_ok(etcd_health, None), "etcd /health", timeout, begin)
        step("etcd", t)

        t = time.monotonic()
        (self.workdir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        start("kube-apiserver", apiserver_args(self.workdir, pki, ports))
        admin_tls = _client_tls(pki.ca_cert, pki.admin)
        readyz = f"{self.server}/readyz"
        self._wait(lambda: _http_ok(readyz, admin_tls), "kube-apiserver /readyz", timeout, begin)
        step("kube-apiserver", t)

        self.kubeconfig.write_text(kubeconfig_yaml(self.server, pki.ca_cert, "admin", pki.admin))
        kcm_kubeconfig = self.workdir / "kcm.kubeconfig"
        kcm_kubeconfig.write_text(
            kubeconfig_yaml(
                self.server, pki.ca_cert, "system:kube-controller-manager", pki.controller_manager
            )
        )
        scheduler_kubeconfig = self.workdir / "scheduler.kubeconfig"
        scheduler_kubeconfig.write_text(
            kubeconfig_yaml(self.server, pki.ca_cert, "system:kube-scheduler", pki.scheduler)
        )

        t = time.monotonic()
        kcm = kcm_args(kcm_kubeconfig, pki, ports["kcm"], node_heartbeat_s)
        start("kube-controller-manager", kcm)
        start("kube-scheduler", scheduler_args(scheduler_kubeconfig, ports["scheduler"]))
        kwok_config = self.workdir / "kwok.yaml"
        kwok_config.write_text(kwok_configuration_yaml(node_heartbeat_s=node_heartbeat_s))
        start("kwok", kwok_args(self.kubeconfig, kwok_config))
        # Serving certs of KCM and scheduler are self-signed; /healthz needs no credentials.
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        for name, port in (("kube-controller-manager", "kcm"), ("kube-scheduler", "scheduler")):
            url = f"https://127.0.0.1:{ports[port]}/healthz"
            self._wait(
                functools.partial(_http_ok, url, insecure), f"{name} /healthz", timeout, begin
            )
        step("controllers", t)

        t = time.monotonic()
        self._probe_kwok(admin_tls, timeout, begin)
        step("kwok", t)

        self.timings["total"] = round(time.monotonic() - begin, 2)
        self._write_state(ports)
        log(f"control plane usable in {self.timings['total']:.1f}s ({self.server})")

    def _probe_kwok(self, tls: ssl.SSLContext, timeout: float, begin: float) -> None:
        """Create a throwaway fake Node and wait for kwok to mark it Ready, then delete it."""
        name = "devcluster-kwok-probe"
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE},
            },
        }
        _request(f"{self.server}/api/v1/nodes", tls, "POST", node, accept={201, 409})

        def ready() -> bool:
            got = _request(f"{self.server}/api/v1/nodes/{name}", tls, "GET")
            conditions = got.get("status", {}).get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        self._wait(ready, "kwok to mark a probe node Ready", timeout, begin)
        _request(f"{self.server}/api/v1/nodes/{name}", tls, "DELETE", accept={200, 404})

    def _wait(self, ready: Callable[[], bool], what: str, timeout: float, begin: float) -> None:
        # Polls every 100 ms until ready, a child dies, or the start budget is spent.
        while True:
            for process in self._processes:
                if not process.alive():
                    raise ControlPlaneError(
                        f"{process.name} exited while waiting for {what}; "
                        f"last log lines of {process.log}:\n{tail(process.log)}"
                    )
            with contextlib.suppress(OSError, ValueError, KeyError):
                if ready():
                    return
            if time.monotonic() - begin > timeout:
                logs = "\n".join(f"--- {p.name}:\n{tail(p.log, 10)}" for p in self._processes)
                raise ControlPlaneError(
                    f"timed out after {timeout:.0f}s waiting for {what}\n{logs}"
                )
            time.sleep(0.1)

    def _write_state(self, ports: dict[str, int]) -> None:
        assert self.workdir is not None
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "ca_file": str(self.ca_file),
            "data_dir": str(self._data_dir) if self._data_dir else None,
            "ports": ports,
            "pids": {p.name: p.pid for p in self._processes},
            "timings": self.timings,
        }
        (self.workdir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")

    # ---- disturbances (tests, the soak) -------------------------------------------------

    def restart(self, name: str, grace: float = STOP_GRACE_SECONDS) -> None:
        """Stop one component (SIGTERM, SIGKILL after ``grace``) and start it again with the
        same arguments; returns once it is spawned, not ready (the caller waits, e.g. on
        ``/readyz``). Call it from the thread that started the control plane."""
        if self.workdir is None or name not in self._argv:
            raise ControlPlaneError(f"{name} was not started by this control plane")
        old = next(p for p in self._processes if p.name == name)
        old.stop(grace)
        log_path = self.workdir / "logs" / f"{name}.log"
        log_path.rename(log_path.with_suffix(f".{old.pid}.log"))
        fresh = spawn(name, self._argv[name], log_path, cwd=self.workdir)
        self._processes[self._processes.index(old)] = fresh
        self._write_state(self._ports)

    def compact_etcd(self, revision: str) -> None:
        """Compact etcd up to ``revision`` (an RV the apiserver handed out): every older RV
        is gone, so a watch resuming from one is answered 410."""
        if "etcd" not in self._ports:
            raise ControlPlaneError("compaction needs the etcd this control plane started")
        request = urllib.request.Request(
            f"http://127.0.0.1:{self._ports['etcd']}/v3/kv/compaction",
            data=json.dumps({"revision": revision, "physical": True}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status != 200:
                raise ControlPlaneError(f"etcd compaction answered {response.status}")

    # ---- stop ---------------------------------------------------------------------------

    def running(self) -> dict[str, bool]:
        return {p.name: p.alive() for p in self._processes}

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM each child by PID in reverse start order, SIGKILL after ``grace``."""
        if not self.owned:
            return
        for process in reversed(self._processes):
            process.stop(grace)
        self._processes.clear()
        if self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None
        if self.workdir is not None:
            with contextlib.suppress(FileNotFoundError):
                (self.workdir / STATE_FILE).unlink()
            if self._remove_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def sweep_stale_etcd_dirs(root: Path) -> list[Path]:
    """Remove etcd data dirs under ``root`` whose etcd no longer runs (a killed harness)."""
    removed: list[Path] = []
    for directory in root.glob(f"{ETCD_DIR_PREFIX}*"):
        try:
            pid = int((directory / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # being set up right now, or not ours
        if not pid_runs(pid, "etcd"):
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    return removed


def _tmpfs_or(fallback: Path) -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else fallback


def _client_tls(ca: Path, client: ClientCert) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(client.cert), str(client.key))
    return context


def _http_ok(url: str, tls: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=tls) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError:
        return False
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _request(
    url: str,
    tls: ssl.SSLContext,
    method: str,
    body: dict[str, Any] | None = None,
    accept: set[int] | None = None,
) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5, context=tls) as response:
            payload: dict[str, Any] = json.loads(response.read() or b"{}")
            return payload
    except urllib.error.HTTPError as error:
        if accept and error.code in accept:
            return {}
        raise
