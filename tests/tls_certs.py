"""Certificates for the TLS tests, made on the spot: a private CA, a server certificate
for 127.0.0.1 and localhost, client certificates, and an unrelated CA to be refused.

Written as PEM files into a directory the `rabbitmq` user can read (extra nodes run as
that user), with the keys unencrypted as both RabbitMQ and the worker expect them.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_KeyType = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Authority:
    name: str
    cert: Path
    key: Path
    _key: _KeyType
    _cert: x509.Certificate

    def issue(
        self,
        directory: Path,
        stem: str,
        common_name: str,
        *,
        hosts: tuple[str, ...] = (),
        client: bool = False,
    ) -> Issued:
        """A leaf certificate signed by this CA: server (for `hosts`) or client."""
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = _base(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]), key)
        builder = (
            builder.issuer_name(self._cert.subject)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return Issued(_write_cert(directory, stem, cert), _write_key(directory, stem, key))


def _base(subject: x509.Name, key: _KeyType) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
    )


def make_authority(directory: Path, name: str) -> Authority:
    """A self-signed CA whose certificate and key land in `directory`/`name`.pem/.key."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _base(subject, key)
        .issuer_name(subject)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
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
        .sign(key, hashes.SHA256())
    )
    return Authority(
        name, _write_cert(directory, name, cert), _write_key(directory, name, key), key, cert
    )


def shared_directory(path: Path) -> Path:
    """`path`, created world-readable: the rabbitmq user must read the server's files."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o755)
    return path


def _write_cert(directory: Path, stem: str, cert: x509.Certificate) -> Path:
    path = directory / f"{stem}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    os.chmod(path, 0o644)
    return path


def _write_key(directory: Path, stem: str, key: _KeyType) -> Path:
    path = directory / f"{stem}.key"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    # Test keys in a throwaway directory: readable so the broker's user can load its own.
    os.chmod(path, 0o644)
    return path
