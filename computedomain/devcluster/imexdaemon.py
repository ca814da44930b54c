"""NVIDIA's real IMEX daemon in the simulated fleet: each daemon pod runs NVIDIA's
``compute-domain-daemon run`` (the pinned build of hack/upstream/build.sh) as a process, the way
the node's kubelet and NVIDIA's kubelet plugin would start it, instead of the simulator's emulated
daemon. Pass ``NvidiaDaemons(...)`` as the simulator's ``daemon_factory``.

What each daemon container gets, as on a real node:

- the pod's environment as the kubelet resolves it (values and fieldRefs of the DaemonSet NVIDIA's
  or our controller wrote), plus the kubelet plugin's CDI variables (``CLIQUE_ID`` from the node's
  ``nvidia.com/gpu.clique``, ``COMPUTE_DOMAIN_UUID``/``NAME``/``NAMESPACE``), derived here by
  default; with ``DaemonRuntime.kubelet`` (e.g. ``drakubelet.SharedDraKubelet`` over NVIDIA's
  real kubelet plugin), the node's plugin prepares the pod's daemon claim instead, over DRA gRPC,
  and the container gets exactly the CDI edits it returned: their environment, their mounts
  (``/imexd`` from the plugin's data directory, holding the template the plugin copied there),
  their device nodes (the fabric-imex-mgmt capability) as plain files in a private ``/dev``; no
  container starts while that preparation fails, and the claim is unprepared once the container
  has ended;
- in-cluster credentials only: ``KUBERNETES_SERVICE_HOST``/``PORT`` and a TokenRequest token of the
  pod's ServiceAccount, bound to the pod and renewed as the kubelet renews it, with the CA, under
  ``/var/run/secrets/kubernetes.io/serviceaccount/``. What the daemon may do is what the RBAC
  installed for that ServiceAccount grants (the tests install the RBAC NVIDIA's chart renders);
- its own mount namespace (hack/upstream/run.sh): ``/imexd`` holding the IMEX config template, as
  the kubelet plugin copies it there (a pod directory by default, the plugin's own with
  ``DaemonRuntime.kubelet``), and a pod-private ``/etc/hosts`` (the kubelet's);
- ``nvidia-imex`` and ``nvidia-imex-ctl`` on its PATH are stand-ins (hack/upstream/imex-standin/),
  because the real ones need NVLink hardware; they never connect anywhere. The stand-in records
  each start, SIGUSR1 and the peers it would reach in ``<pod dir>/state/events``.

The kubelet's part is played here too: the container's exec probes run as the DaemonSet defines
them (period, timeout, thresholds), inside the container's mount namespace, and their outcome is
the pod's readiness; a container that exits is restarted with the kubelet's back-off and
``restartCount``; when the pod is gone the daemon gets SIGTERM, then SIGKILL after the pod's grace
period. Everything a pod leaves lives under ``workdir/<namespace>.<pod>/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.devcluster.assets import REPO_ROOT
from computedomain.devcluster.cdi import Injected
from computedomain.devcluster.clients import TOKEN_SECONDS, request_service_account_token
from computedomain.devcluster.drakubelet import container_binds
from computedomain.devcluster.podrunner import (
    RUNNING_FINALIZER,
    PodRunError,
    expand,
    pod_container,
    resolve_env,
    terminate,
)
from computedomain.devcluster.processes import pid_runs
from computedomain.devcluster.upstream import DAEMON, UPSTREAM_RUN_SCRIPT, UpstreamBuild
from computedomain.runtime import patches
from computedomain.runtime.client import ApiError
from computedomain.runtime.resources import PODS
from computedomain.sim.context import SimContext
from computedomain.sim.daemon import DaemonContainer
from computedomain.sim.decisions import node_clique_id
from computedomain.sim.podstatus import ContainerPhase
from computedomain.sim.signals import domain_key

log = logging.getLogger("computedomain.devcluster.imexdaemon")

STANDIN_DIR = REPO_ROOT / "hack" / "upstream" / "imex-standin"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# NVIDIA's IMEX config template: the kubelet plugin copies it to /imexd/imexd.cfg.tmpl.
CONFIG_TEMPLATE = "compute-domain-daemon-config.tmpl.cfg"
# The kubelet's container restart back-off: 10 s, doubled per crash, at most 5 min.
KUBELET_BACKOFF = 10.0
KUBELET_BACKOFF_MAX = 300.0
# A container that ran this long before it exited starts again from the first delay.
KUBELET_BACKOFF_RESET = 600.0
DEFAULT_GRACE_PERIOD = 30.0
KUBELET_HOSTS = (
    "# Kubernetes-managed hosts file.\n"
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)


IMEXD = "/imexd"


class DaemonKubelet(Protocol):
    """Who prepares a daemon pod's claims with a real kubelet plugin (``drakubelet.DraKubelet``)."""

    def serves(self, node_name: str) -> bool: ...

    async def prepare(self, pod: Mapping[str, Any]) -> Injected | None:
        """The CDI edits once the claims are prepared (retried until then); None: pod gone."""

    async def unprepare(self, pod: Mapping[str, Any]) -> None: ...


@dataclass(frozen=True)
class DaemonRuntime:
    """Where and how the daemons run: NVIDIA's build, the apiserver they reach in-cluster, a
    client allowed to request tokens, and a directory for the pods' files."""

    build: UpstreamBuild
    admin: ApiClient
    server: str
    ca_file: Path
    workdir: Path
    # The first restart delay of a crashed container (the kubelet's 10 s by default).
    restart_backoff: float = KUBELET_BACKOFF
    # Seconds the stand-in IMEX takes to report READY after its start.
    imex_ready_after: float = 0.0
    # Nodes whose daemon container gets none of the kubelet plugin's CDI edits (a runtime
    # with CDI disabled, #965): NVIDIA's daemon refuses to start there.
    without_cdi: frozenset[str] = frozenset()
    # Off by default (the CDI edits derived here): the stand-in kubelet of the simulator's
    # context that has the node's real kubelet plugin prepare the daemon claim.
    kubelet: Callable[[SimContext], DaemonKubelet] | None = None


@dataclass(frozen=True)
class Probe:
    """One exec probe of the container spec, with the kubelet's defaults."""

    command: tuple[str, ...]
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def of(cls, spec: Mapping[str, Any] | None, env: Mapping[str, str]) -> Probe | None:
        if not spec:
            return None
        command = (spec.get("exec") or {}).get("command")
        if not command:
            raise PodRunError(f"only exec probes are supported, got {dict(spec)}")
        return cls(
            command=tuple(expand(str(arg), env) for arg in command),
            initial_delay=float(spec.get("initialDelaySeconds") or 0),
            period=float(spec.get("periodSeconds") or 10),
            timeout=float(spec.get("timeoutSeconds") or 1),
            success_threshold=int(spec.get("successThreshold") or 1),
            failure_threshold=int(spec.get("failureThreshold") or 3),
        )


@dataclass
class StandinImex:
    """What the nvidia-imex stand-in of one pod recorded: (what, pid, peers) per line."""

    state_dir: Path

    def events(self) -> list[tuple[str, int, tuple[str, ...]]]:
        path = self.state_dir / "events"
        records = []
        for line in path.read_text().splitlines() if path.exists() else []:
            _, pid, what, peers = line.split(" ", 3)
            addresses = peers.removeprefix("peers=")
            records.append((what, int(pid), tuple(addresses.split(",") if addresses else ())))
        return records

    def peers(self) -> tuple[str, ...] | None:
        """The peers of its latest start or SIGUSR1; None before it ever started."""
        seen = [peers for what, _, peers in self.events() if what in ("start", "SIGUSR1")]
        return seen[-1] if seen else None

    def never_ready(self, on: bool = True) -> None:
        """Make its nvidia-imex-ctl report NOT_READY (or READY again) from now on."""
        flag = self.state_dir / "never-ready"
        if on:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)


class NvidiaImexDaemon(DaemonContainer):
    """One daemon pod's container running NVIDIA's binary (see the module docstring)."""

    def __init__(
        self, ctx: SimContext, pod: dict[str, Any], domain_id: str, runtime: DaemonRuntime
    ) -> None:
        super().__init__(ctx, pod, domain_id)
        self.runtime = runtime
        self.pod_dir = runtime.workdir / f"{self.namespace}.{self.name}"
        self.imex = StandinImex(self.pod_dir / "state")
        self.process: asyncio.subprocess.Process | None = None
        self.grace_period = float(
            pod["spec"].get("terminationGracePeriodSeconds") or DEFAULT_GRACE_PERIOD
        )
        self.stopping = False
        # The host directory at the container's /imexd; the plugin's, once it prepared.
        self.imexd = self.pod_dir / "imexd"
        kubelet = runtime.kubelet(ctx) if runtime.kubelet is not None else None
        self.kubelet = kubelet if kubelet is not None and kubelet.serves(self.node_name) else None
        # What the real plugin's CDI edits gave the container (None: derived here).
        self.injected: Injected | None = None

    @property
    def hosts(self) -> Path:
        return self.pod_dir / "hosts"

    @property
    def log_path(self) -> Path:
        return self.pod_dir / "container.log"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # -- life cycle -----------------------------------------------------------------------

    async def run(self) -> None:
        pod = self.ctx.pod(self.key)
        if pod is None:
            return
        self._adopt_ip(pod)
        # As a kubelet, keep the deleted pod (and so its bound token) until the daemon exited.
        await self._pod_finalizer(patches.add_finalizer(pod, RUNNING_FINALIZER, guard_rv=False))
        if self.kubelet is not None:
            # As the kubelet: no container before the plugin prepared the claim.
            self.injected = await self.kubelet.prepare(pod)
            if self.injected is None:
                return  # the pod is gone
            pod = self.ctx.pod(self.key) or pod
            mount = next((m for m in self.injected.mounts if m.container_path == IMEXD), None)
            if mount is not None:
                self.imexd = Path(mount.host_path)
        await self._write_pod(ContainerPhase.STARTING)
        container = pod_container(pod, c.DAEMON_CONTAINER)
        env = await self._environment(pod, container)
        await self._prepare_files(pod)
        rotation = asyncio.create_task(self._rotate_token(pod))
        try:
            await self._run_until_stopped(container, env)
        finally:
            rotation.cancel()
            await asyncio.gather(rotation, return_exceptions=True)

    async def _run_until_stopped(
        self, container: Mapping[str, Any], env: Mapping[str, str]
    ) -> None:
        command = [expand(str(arg), env) for arg in container.get("command") or []]
        command += [expand(str(arg), env) for arg in container.get("args") or []]
        if not command or Path(command[0]).name != DAEMON:
            raise PodRunError(f"{self.key}: unexpected daemon command {command}")
        backoff = self.runtime.restart_backoff
        while not self.stopping:
            started = self.ctx.clock.now()
            code = await self._run_container(command[1:], container, env)
            if self.stopping:
                return
            if self.ctx.clock.now() - started >= KUBELET_BACKOFF_RESET:
                backoff = self.runtime.restart_backoff  # ran long enough: forgiven
            self.restart_count += 1
            self.ready = False
            # As the kubelet reports it: NVIDIA's DaemonSet sets no terminationMessagePolicy
            # and the daemon writes no termination log, so no message; its words are its log.
            self._exit_code, self._exit_message = code, ""
            log.warning(
                "NVIDIA's daemon exited; restarting after back-off",
                extra={"pod": self.key, "code": code, "backoff": backoff},
            )
            await self._write_pod(
                ContainerPhase.CRASH_LOOP, f"back-off {backoff:g}s restarting failed container"
            )
            await self.ctx.clock.sleep(backoff)
            backoff = min(backoff * 2, KUBELET_BACKOFF_MAX)
            await self._write_pod(ContainerPhase.STARTING)

    async def stop(self) -> None:
        """SIGTERM to the daemon (it removes its entry and stops its IMEX), SIGKILL to the
        container after the grace period."""
        self.stopping = True
        if self.process is not None:
            if await terminate(self.process, self.grace_period) == -signal.SIGKILL:
                log.warning("NVIDIA's daemon ignored SIGTERM; killed", extra={"pod": self.key})
            _kill_group(self.process)  # what it left running (its nvidia-imex)
        if self.kubelet is not None:
            gone = {
                "metadata": {"namespace": self.namespace, "name": self.name, "uid": self.uid},
                "spec": {"nodeName": self.node_name},
            }
            await self.kubelet.unprepare(gone)
        await self._release_pod()

    async def _release_pod(self) -> None:
        try:
            pod = await self.ctx.client.get(PODS, self.name, self.namespace)
        except ApiError as error:
            if error.is_not_found:
                return
            raise
        await self._pod_finalizer(patches.remove_finalizer(pod, RUNNING_FINALIZER))

    async def _pod_finalizer(self, patch: patches.Patch | None) -> None:
        if patch is None:
            return
        try:
            await self.ctx.write(
                lambda: self.ctx.client.patch(
                    PODS, self.name, patch, self.namespace, patch_type="json"
                )
            )
        except ApiError as error:
            if not (error.is_not_found or error.is_invalid):
                raise

    def request_crash(self) -> None:
        """The simulator's crash fault (``Simulator.crash_daemon``): see ``crash``."""
        self.crash()

    def crash(self) -> None:
        """Kill the container's processes now (SIGKILL), as an OOM kill would."""
        if self.process is not None and self.process.returncode is None:
            _kill_group(self.process)

    # -- the container --------------------------------------------------------------------

    async def _run_container(
        self, args: Sequence[str], container: Mapping[str, Any], env: Mapping[str, str]
    ) -> int:
        argv = [
            "bash",
            str(UPSTREAM_RUN_SCRIPT),
            *self._cdi_binds(),
            "--bind",
            f"{self.hosts}:/etc/hosts",
            "--bind",
            f"{self.pod_dir / 'serviceaccount'}:{SERVICE_ACCOUNT_DIR}",
            str(self.runtime.build.bin_dir),
            DAEMON,
            *args,
        ]
        with self.log_path.open("ab") as out:
            self.process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env=dict(env),
                cwd=self.pod_dir,
                start_new_session=True,
            )
        process = self.process
        probes = asyncio.create_task(self._probe(process, container, env))
        try:
            code = await process.wait()
        finally:
            # Cancelled (the pod is gone): the process is left to stop(), which lets it leave.
            probes.cancel()
            await asyncio.gather(probes, return_exceptions=True)
        # Whatever the daemon left running (its nvidia-imex) ends with the container.
        _kill_group(process)
        return code

    async def _probe(
        self,
        process: asyncio.subprocess.Process,
        container: Mapping[str, Any],
        env: Mapping[str, str],
    ) -> None:
        """The kubelet's prober: startup first, then readiness and liveness side by side."""
        startup = Probe.of(container.get("startupProbe"), env)
        if startup is not None and not await self._until(process, startup, env, success=True):
            log.warning("Startup probe failed too often; killing", extra={"pod": self.key})
            _kill_group(process)
            return
        readiness = Probe.of(container.get("readinessProbe"), env)
        liveness = Probe.of(container.get("livenessProbe"), env)
        loops = [self._readiness(process, readiness, env)]
        if liveness is not None:
            loops.append(self._liveness(process, liveness, env))
        await asyncio.gather(*loops)

    async def _readiness(
        self, process: asyncio.subprocess.Process, probe: Probe | None, env: Mapping[str, str]
    ) -> None:
        if probe is None:
            await self._set_ready(True)
            return
        # Right after the startup probe passed, as the kubelet does (no initial delay here).
        successes = failures = 0
        while True:
            if await self._exec(process, probe, env):
                successes, failures = successes + 1, 0
                if successes >= probe.success_threshold:
                    await self._set_ready(True)
            else:
                successes, failures = 0, failures + 1
                if failures >= probe.failure_threshold:
                    await self._set_ready(False)
            await self.ctx.clock.sleep(probe.period)

    async def _liveness(
        self, process: asyncio.subprocess.Process, probe: Probe, env: Mapping[str, str]
    ) -> None:
        if not await self._until(process, probe, env, success=False):
            return
        log.warning("Liveness probe failed; killing", extra={"pod": self.key})
        _kill_group(process)

    async def _until(
        self,
        process: asyncio.subprocess.Process,
        probe: Probe,
        env: Mapping[str, str],
        *,
        success: bool,
    ) -> bool:
        """Run ``probe`` every period until it has passed (``success``) or failed its threshold
        in a row; False if the other outcome ended it first (startup: failures; liveness: never)."""
        await self.ctx.clock.sleep(probe.initial_delay)
        failures = 0
        while True:
            passed = await self._exec(process, probe, env)
            failures = 0 if passed else failures + 1
            if success and passed:
                return True
            if failures >= probe.failure_threshold:
                return not success
            await self.ctx.clock.sleep(probe.period)

    async def _exec(
        self, process: asyncio.subprocess.Process, probe: Probe, env: Mapping[str, str]
    ) -> bool:
        """One exec probe inside the container's mount namespace and root; exit 0 passes."""
        if process.returncode is not None or not pid_runs(process.pid, DAEMON):
            return False  # not exec'd into the container yet, or gone
        argv = ["nsenter", f"--target={process.pid}", "--mount", "--root", "--wd", "--"]
        probe_run = await asyncio.create_subprocess_exec(
            *argv,
            *probe.command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            env=dict(env),
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(probe.timeout):
                return await probe_run.wait() == 0
        except TimeoutError:
            _kill_group(probe_run)
            await probe_run.wait()
            return False

    async def _set_ready(self, ready: bool) -> None:
        if ready == self.ready and self._phase is not None:
            return
        self.ready = ready
        await self._write_pod(ContainerPhase.READY if ready else ContainerPhase.STARTING)
        if ready:
            self.ctx.daemon_ready(self.node_name)

    # -- what kubelet and the kubelet plugin give the container ---------------------------

    async def _environment(
        self, pod: Mapping[str, Any], container: Mapping[str, Any]
    ) -> dict[str, str]:
        cd = await self._compute_domain()
        server = urlsplit(self.runtime.server)
        with_ip = {**pod, "status": {**(pod.get("status") or {}), "podIP": self.ip}}
        return {
            "PATH": f"{STANDIN_DIR}:{self.runtime.build.bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOSTNAME": self.name,
            "KUBERNETES_SERVICE_HOST": server.hostname or "",
            "KUBERNETES_SERVICE_PORT": str(server.port or 443),
            "IMEX_STANDIN_STATE": str(self.imex.state_dir),
            "IMEX_STANDIN_READY_AFTER": str(self.runtime.imex_ready_after),
            **resolve_env(with_ip, container),
            **self._cdi_edits(cd),
        }

    def _cdi_binds(self) -> list[str]:
        """The CDI edits' mounts and device nodes as run.sh binds: the real plugin's, or the
        /imexd directory made here."""
        if self.injected is None:
            return ["--bind", f"{self.imexd}:{IMEXD}"]
        if self.node_name in self.runtime.without_cdi:
            return []
        return container_binds(self.injected, self.pod_dir / "devices")

    def _cdi_edits(self, cd: Mapping[str, Any]) -> dict[str, str]:
        """The kubelet plugin's CDI edits for a daemon claim, unless the runtime drops them."""
        if self.node_name in self.runtime.without_cdi:
            return {}
        if self.injected is not None:
            return dict(self.injected.env)
        return {
            "CLIQUE_ID": node_clique_id(self.ctx.node(self.node_name)),
            "COMPUTE_DOMAIN_UUID": self.domain_id,
            "COMPUTE_DOMAIN_NAME": cd["metadata"]["name"],
            "COMPUTE_DOMAIN_NAMESPACE": cd["metadata"]["namespace"],
        }

    async def _compute_domain(self) -> dict[str, Any]:
        """The claim's CD (the plugin prepares the claim only once it knows the CD)."""
        while True:
            with self.ctx.signals.listen([domain_key(self.domain_id)]) as waiter:
                cd = self.ctx.compute_domain(self.domain_id)
                if cd is not None:
                    return cd
                await waiter.wait(self.ctx.settings.recheck_interval)

    async def _token(self, pod: Mapping[str, Any]) -> str:
        account = pod["spec"].get("serviceAccountName") or "default"
        return await request_service_account_token(
            self.runtime.admin, self.namespace, account, TOKEN_SECONDS, pod=(self.name, self.uid)
        )

    async def _rotate_token(self, pod: Mapping[str, Any]) -> None:
        """A fresh token at 80% of the old one's life, as the kubelet does; client-go re-reads
        the file. Written beside and renamed, so the daemon never reads half a token."""
        path = self.pod_dir / "serviceaccount" / "token"
        while True:
            await self.ctx.clock.sleep(TOKEN_SECONDS * 0.8)
            fresh = path.with_name(".token.new")
            fresh.write_text(await self._token(pod))
            fresh.replace(path)

    async def _prepare_files(self, pod: Mapping[str, Any]) -> None:
        token = await self._token(pod)
        secrets = self.pod_dir / "serviceaccount"
        for directory in (secrets, self.imex.state_dir):
            directory.mkdir(parents=True, exist_ok=True)
        if self.injected is None:  # else the plugin made /imexd and its template
            self.imexd.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(
                self.runtime.build.templates / CONFIG_TEMPLATE, self.imexd / "imexd.cfg.tmpl"
            )
        (secrets / "token").write_text(token)
        shutil.copyfile(self.runtime.ca_file, secrets / "ca.crt")
        (secrets / "namespace").write_text(self.namespace)
        self.hosts.write_text(f"{KUBELET_HOSTS}{self.ip}\t{self.name}\n")


@dataclass
class NvidiaDaemons:
    """The simulator's ``daemon_factory`` for NVIDIA's daemon; remembers every container it made
    (``on_node``) and stops those still running on ``close``."""

    runtime: DaemonRuntime
    containers: dict[str, NvidiaImexDaemon] = field(default_factory=dict)

    def __call__(self, ctx: SimContext, pod: dict[str, Any], domain_id: str) -> NvidiaImexDaemon:
        daemon = NvidiaImexDaemon(ctx, pod, domain_id, self.runtime)
        self.containers[daemon.uid] = daemon
        return daemon

    def on_node(self, node_name: str) -> NvidiaImexDaemon | None:
        """The newest container of a running daemon pod on the node."""
        running = [
            daemon
            for daemon in self.containers.values()
            if daemon.node_name == node_name and not daemon.stopping
        ]
        return running[-1] if running else None

    async def close(self) -> None:
        await asyncio.gather(*(daemon.stop() for daemon in self.containers.values()))


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
