"""The webhook's serving certificate, when no cert-manager mounts one: a CA and a serving
certificate made here, kept in a Secret all replicas share, the CA written into the
MutatingWebhookConfiguration's ``caBundle``.

One Secret, not a certificate per replica: the apiserver trusts one ``caBundle``, and the
Service sends each admission to any replica. The first replica to start creates it; the others
find it (a create that meets AlreadyExists reads the winner's).

``cryptography`` is imported only here, and only when the controller makes the certificate:
a controller without the webhook never loads it.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import logging
import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from computedomain.runtime.client import KubeClient
from computedomain.runtime.errors import ApiError
from computedomain.runtime.resources import MUTATING_WEBHOOK_CONFIGURATIONS, SECRETS

log = logging.getLogger(__name__)

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
CA_FILE = "ca.crt"
VALIDITY = datetime.timedelta(days=3650)
# Attempts of the caBundle write when the configuration changes between its read and write.
CA_BUNDLE_ATTEMPTS = 5


@dataclass(frozen=True)
class ServingCertificate:
    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.load_into(context)
        return context

    def load_into(self, context: ssl.SSLContext) -> None:
        """Serve this certificate from now on (connections already open keep theirs). The ssl
        module reads a chain only from files: a private directory, removed once read."""
        with tempfile.TemporaryDirectory(prefix="computedomain-webhook-") as directory:
            cert, key = Path(directory, CERT_FILE), Path(directory, KEY_FILE)
            cert.write_bytes(self.cert_pem)
            key.write_bytes(self.key_pem)  # in a directory only this user can read
            context.load_cert_chain(cert, key)


def from_directory(directory: str) -> ServingCertificate:
    """cert-manager's Secret as mounted (tls.crt, tls.key and, when it has one, ca.crt)."""
    folder = Path(directory)
    ca = folder / CA_FILE
    return ServingCertificate(
        cert_pem=(folder / CERT_FILE).read_bytes(),
        key_pem=(folder / KEY_FILE).read_bytes(),
        ca_pem=ca.read_bytes() if ca.exists() else b"",
    )


def files_version(directory: str) -> tuple[tuple[int, int], ...]:
    """Changes when the mounted files do: a Secret's update swaps the files behind symlinks
    (new inode, new mtime), which ``stat`` follows."""
    stats = (os.stat(Path(directory, name)) for name in (CERT_FILE, KEY_FILE))
    return tuple((st.st_ino, st.st_mtime_ns) for st in stats)


def issue(hosts: Sequence[str], now: datetime.datetime | None = None) -> ServingCertificate:
    """A new CA and a serving certificate signed by it for ``hosts`` (DNS names or IPs)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = now or datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "computedomain-webhook-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCertificate(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
    )


def _from_secret(secret: dict[str, Any]) -> ServingCertificate:
    data = secret.get("data") or {}
    return ServingCertificate(
        *(base64.b64decode(data.get(key) or "") for key in (CERT_FILE, KEY_FILE, CA_FILE))
    )


async def shared(
    client: KubeClient, namespace: str, secret_name: str, hosts: Sequence[str]
) -> ServingCertificate:
    """The certificate in the Secret, made and stored first when there is none."""
    try:
        return _from_secret(await client.get(SECRETS, secret_name, namespace))
    except ApiError as err:
        if not err.is_not_found:
            raise
    made = issue(hosts)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": secret_name, "namespace": namespace},
        "data": {
            CERT_FILE: base64.b64encode(made.cert_pem).decode(),
            KEY_FILE: base64.b64encode(made.key_pem).decode(),
            CA_FILE: base64.b64encode(made.ca_pem).decode(),
        },
    }
    try:
        await client.create(SECRETS, secret, namespace)
    except ApiError as err:
        if not err.is_already_exists:
            raise
        # Another replica made one first: serve that one, so one caBundle trusts both.
        return _from_secret(await client.get(SECRETS, secret_name, namespace))
    log.info("Created the webhook's serving certificate", extra={"secret": secret_name})
    return made


async def write_ca_bundle(client: KubeClient, configuration: str, ca_pem: bytes) -> bool:
    """Every webhook of the configuration trusts ``ca_pem``; False when the configuration does
    not exist (yet). A write only when a webhook's caBundle differs."""
    bundle = base64.b64encode(ca_pem).decode()
    for _ in range(CA_BUNDLE_ATTEMPTS):
        try:
            found = await client.get(MUTATING_WEBHOOK_CONFIGURATIONS, configuration)
        except ApiError as err:
            if err.is_not_found:
                return False
            raise
        webhooks = found.get("webhooks") or []
        stale = [w for w in webhooks if (w.get("clientConfig") or {}).get("caBundle") != bundle]
        if not stale:
            return True
        for webhook in stale:
            webhook.setdefault("clientConfig", {})["caBundle"] = bundle
        try:
            await client.replace(MUTATING_WEBHOOK_CONFIGURATIONS, found)
        except ApiError as err:
            if not err.is_conflict:
                raise
            continue
        log.info(
            "Wrote the webhook's CA into its configuration", extra={"configuration": configuration}
        )
        return True
    return False
