"""API resources addressed by group/version/plural, and their REST paths."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The REST path, e.g. ``/apis/apps/v1/namespaces/x/daemonsets/y/status``.

        A namespaced resource without ``namespace`` gives the all-namespaces collection.
        """
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [root]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        elif not self.namespaced and namespace:
            raise ValueError(f"{self.kind} is cluster-scoped; got namespace {namespace!r}")
        parts.append(self.plural)
        if name is not None:
            if not name:
                raise ValueError("name must not be empty")
            parts.append(name)
        if subresource is not None:
            if name is None:
                raise ValueError("a subresource needs a name")
            parts.append(subresource)
        return "/".join(parts)


NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PODS = Resource("", "v1", "pods", "Pod", namespaced=True)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True)
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
SECRETS = Resource("", "v1", "secrets", "Secret", namespaced=True)
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet", namespaced=True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", namespaced=True)
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet", namespaced=True)
JOBS = Resource("batch", "v1", "jobs", "Job", namespaced=True)
CUSTOM_RESOURCE_DEFINITIONS = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)
RESOURCE_CLAIM_TEMPLATES = Resource(
    "resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", namespaced=True
)
RESOURCE_CLAIMS = Resource(
    "resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", namespaced=True
)
RESOURCE_SLICES = Resource(
    "resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False
)
DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False)
MUTATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
EVENTS = Resource("events.k8s.io", "v1", "events", "Event", namespaced=True)
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)
