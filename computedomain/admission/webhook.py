"""The placement webhook in the controller's process: its certificate, its server, its Events.

It runs in every replica, leader or not (the Service sends admissions to any of them): its only
write, a CD's placement annotation, is safe from any replica by its resourceVersion precondition
(placer.py), so it goes without the leader's write fence, and its Events have a writer of their
own (the leader's runs only while it leads).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import Any

from computedomain.admission import certificates
from computedomain.admission.ledger import Ledger
from computedomain.admission.placer import Placement, Placer
from computedomain.admission.server import WebhookServer
from computedomain.admission.workload_domains import WorkloadDomains
from computedomain.config import Settings
from computedomain.domain import workload_domain
from computedomain.domain.caches import Caches
from computedomain.observability.metrics import DomainMetrics
from computedomain.runtime.client import KubeClient
from computedomain.runtime.clock import Clock
from computedomain.runtime.events import EventRecorder
from computedomain.runtime.metrics import RuntimeMetrics

log = logging.getLogger(__name__)

# How often the configuration's caBundle is checked again (a chart upgrade may reset it), and
# the mounted certificate's files (cert-manager renews it, by default a month before it expires).
CA_BUNDLE_RECHECK = 60.0
CERTIFICATE_RECHECK = 60.0


@dataclass
class PlacementWebhook:
    settings: Settings
    client: KubeClient
    caches: Caches
    metrics: RuntimeMetrics
    clock: Clock
    reporting_controller: str
    domain_metrics: DomainMetrics

    def __post_init__(self) -> None:
        s = self.settings
        # Every replica answers admission, a stand-by too (the Service spreads the calls): its
        # writes (the decision annotation, one Event) are not the leader's to fence; the
        # annotation's resourceVersion precondition is what keeps one decision per domain.
        self.client = self.client.unfenced()
        self.recorder = EventRecorder(
            self.client,
            self.reporting_controller,
            f"{self.reporting_controller.split('/')[-1]}-webhook-{s.pod_name}"[:128],
            clock=self.clock,
            metrics=self.metrics,
        )
        # Several replicas (leader election on) decide through the ledger, one after another.
        ledger = Ledger(self.client, s.lease_namespace) if s.leader_election else None
        self.placer = Placer(self.client, self.caches, self.recorder, ledger)
        self.workload_domains = WorkloadDomains(self.client, self.caches)
        self.server: WebhookServer | None = None
        self.certificate: certificates.ServingCertificate | None = None
        self.ssl_context: ssl.SSLContext | None = None

    async def place(
        self, namespace: str, pod: dict[str, Any], namespace_opted_in: bool
    ) -> Placement | None:
        """A pod of a workload opted in for a CD of its own: the CD (created if absent), the
        pod wired to its channel, then placed; any other pod: placed if its CD is opted in."""
        domain = workload_domain.for_pod(pod)
        if domain is not None:
            cd = await self.workload_domains.ensure(namespace, domain)
            wiring = tuple(workload_domain.claim_wiring(pod, domain.template))
            placement = None
            if self._synced():
                wired = workload_domain.wired(pod, domain.template)
                placement = await self.placer.place_in(cd, wired, namespace_opted_in)
            clique = placement.clique if placement is not None else None
            return Placement(f"{namespace}/{domain.name}", clique, wiring)
        if not self._synced():
            return None
        return await self.placer.place(namespace, pod, namespace_opted_in)

    def _synced(self) -> bool:
        # Before the first LIST nothing is known of the fleet: admitted unplaced (a pod placed
        # on an empty inventory would be told that no clique fits).
        if self.caches.compute_domains.has_synced and self.caches.nodes.has_synced:
            return True
        log.warning("Placement webhook called before its caches synced; pod not placed")
        return False

    async def start(self) -> None:
        """Gets the certificate and listens; raises when it cannot (the process exits)."""
        s = self.settings
        assert s.placement_webhook_address is not None
        if s.placement_webhook_cert_dir:
            self.certificate = certificates.from_directory(s.placement_webhook_cert_dir)
        else:
            self.certificate = await certificates.shared(
                self.client, s.driver_namespace, s.placement_webhook_secret,
                s.placement_webhook_hosts,
            )  # fmt: skip
        self.ssl_context = self.certificate.ssl_context()
        self.server = WebhookServer(
            self.place,
            s.placement_webhook_address,
            self.ssl_context,
            observe=self.domain_metrics.observe_admission,
        )
        await self.server.start()

    async def run(self) -> None:
        """Events, and the caBundle kept (when the controller made the certificate)."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.recorder.run())
            if self.settings.placement_webhook_cert_dir:
                group.create_task(self._follow_mounted_certificate())
            else:
                group.create_task(self._keep_ca_bundle())

    def reload_if_changed(self, seen: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        """The mounted certificate served again when its files changed; their version now."""
        directory = self.settings.placement_webhook_cert_dir
        assert directory is not None
        assert self.ssl_context is not None
        now = certificates.files_version(directory)
        if now != seen:
            self.certificate = certificates.from_directory(directory)
            self.certificate.load_into(self.ssl_context)
            log.info("Serving the renewed webhook certificate", extra={"dir": directory})
        return now

    async def _follow_mounted_certificate(self) -> None:
        directory = self.settings.placement_webhook_cert_dir
        assert directory is not None
        seen = certificates.files_version(directory)
        while True:
            await self.clock.sleep(CERTIFICATE_RECHECK)
            try:
                seen = self.reload_if_changed(seen)
            except (OSError, ssl.SSLError) as err:
                # Halfway through a Secret's update, or a bad pair: keep serving the old one.
                log.warning("Cannot read the renewed certificate", extra={"err": repr(err)})

    async def _keep_ca_bundle(self) -> None:
        assert self.certificate is not None
        name = self.settings.placement_webhook_configuration
        missing_said = False
        while True:
            try:
                found = await certificates.write_ca_bundle(
                    self.client, name, self.certificate.ca_pem
                )
            except Exception as err:
                log.warning("Cannot write the webhook's caBundle", extra={"err": repr(err)})
            else:
                if not found and not missing_said:
                    log.warning(
                        "MutatingWebhookConfiguration %s not found: the apiserver cannot trust "
                        "the webhook until it exists",
                        name,
                    )
                missing_said = not found
            await self.clock.sleep(CA_BUNDLE_RECHECK)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
