"""Throwaway PKI for one local control plane run.

A tiny CA signs the apiserver's serving certificate and one client certificate per identity
(admin in ``system:masters``, KCM and scheduler under the user names bootstrap RBAC binds).
An RSA key pair signs service-account tokens so the TokenRequest API works.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=7)
# First address of --service-cluster-ip-range: in-cluster clients reach the apiserver there.
SERVICE_IP = "10.0.0.1"


@dataclass(frozen=True)
class ClientCert:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    sa_private_key: Path
    sa_public_key: Path
    admin: ClientCert
    controller_manager: ClientCert
    scheduler: ClientCert


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _issue(
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    is_ca: bool = False,
    server_names: tuple[str, ...] = (),
    server_ips: tuple[str, ...] = (),
    client: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if is_ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        if server_names or server_ips:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
            alt_names: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
            alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def generate_pki(directory: Path) -> Pki:
    """Write a fresh CA, serving cert, client certs and SA key pair into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("computedomain-devcluster-ca")
    ca = _issue(ca_name, ca_key.public_key(), ca_name, ca_key, is_ca=True)
    _write_cert(directory / "ca.crt", ca)
    _write_key(directory / "ca.key", ca_key)

    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving = _issue(
        _name("kube-apiserver"),
        serving_key.public_key(),
        ca_name,
        ca_key,
        server_names=(
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ),
        server_ips=("127.0.0.1", SERVICE_IP),
    )
    _write_cert(directory / "apiserver.crt", serving)
    _write_key(directory / "apiserver.key", serving_key)

    def client(stem: str, common_name: str, organization: str | None = None) -> ClientCert:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(
            _name(common_name, organization), key.public_key(), ca_name, ca_key, client=True
        )
        _write_cert(directory / f"{stem}.crt", cert)
        _write_key(directory / f"{stem}.key", key)
        return ClientCert(directory / f"{stem}.crt", directory / f"{stem}.key")

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(directory / "sa.key", sa_key)
    (directory / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return Pki(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        sa_private_key=directory / "sa.key",
        sa_public_key=directory / "sa.pub",
        admin=client("admin", "computedomain-admin", "system:masters"),
        controller_manager=client("kcm", "system:kube-controller-manager"),
        scheduler=client("scheduler", "system:kube-scheduler"),
    )


def kubeconfig_yaml(server: str, ca_cert: Path, user: str, credentials: ClientCert) -> str:
    """A kubeconfig that references the PEM files by absolute path."""
    return (
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        "- name: devcluster\n"
        "  cluster:\n"
        f"    server: {server}\n"
        f"    certificate-authority: {ca_cert}\n"
        "users:\n"
        f"- name: {user}\n"
        "  user:\n"
        f"    client-certificate: {credentials.cert}\n"
        f"    client-key: {credentials.key}\n"
        "contexts:\n"
        "- name: devcluster\n"
        "  context:\n"
        "    cluster: devcluster\n"
        f"    user: {user}\n"
        "current-context: devcluster\n"
    )
