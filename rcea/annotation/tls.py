"""The front door's certificate: the operator's own, or one from a local certificate authority.

With ``RCEA_TLS_CERT`` / ``RCEA_TLS_KEY`` the operator's files are used as they are (checked:
both readable, the certificate valid now and issued for the public name). Without them rcea
makes, once per data dir, a local certificate authority (``<door>/ca.key``, mode 0600, never
leaves the server; ``<door>/ca.crt``, the file every person's browser must trust) and a
server certificate for the public name, signed by it and remade when the name changes or
it nears its end. Keys are ECDSA P-256; the server certificate lives 397 days (browsers
refuse longer ones), the authority ten years.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT, CA_KEY = "ca.crt", "ca.key"
SERVER_CERT, SERVER_KEY = "server.crt", "server.key"
SERVER_DAYS, CA_DAYS = 397, 3650
RENEW_DAYS = 30  # a server certificate with less left is remade at the next start


class TLSError(RuntimeError):
    """A certificate or key is missing, unreadable or not for the public name; says which."""


@dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path
    ca: Path | None  # the local authority people must trust; None for the operator's own


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name.strip("[]")))
    except ValueError:
        return x509.DNSName(name)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _local_ca(door: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = door / CA_CERT, door / CA_KEY
    if cert_path.exists() and key_path.exists():
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return cert, key
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "rcea"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"rcea local CA {os.urandom(4).hex()}"),
        ]
    )
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    _write(key_path, _pem_key(key), 0o600)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o600)
    return cert, key


def names_of(cert: x509.Certificate) -> list[str]:
    """The DNS names and IP addresses a certificate is issued for."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [*san.get_values_for_type(x509.DNSName)] + [
        str(ip) for ip in san.get_values_for_type(x509.IPAddress)
    ]


def _covers(cert: x509.Certificate, name: str) -> bool:
    want = name.strip("[]").lower()
    for have in names_of(cert):
        have = have.lower()
        if have == want or (
            have.startswith("*.") and want.split(".", 1)[-1] == have[2:] and "." in want
        ):
            return True
    return False


def local_certificate(door: Path, public_host: str) -> Certificate:
    """The local authority and a server certificate for ``public_host`` (made or reused)."""
    door.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca_cert, ca_key = _local_ca(door)
    cert_path, key_path = door / SERVER_CERT, door / SERVER_KEY
    if cert_path.exists() and key_path.exists():
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        fresh = cert.not_valid_after_utc - _now() > dt.timedelta(days=RENEW_DAYS)
        if fresh and _covers(cert, public_host) and cert.issuer == ca_cert.subject:
            return Certificate(cert_path, key_path, door / CA_CERT)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, public_host)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=SERVER_DAYS))
        .add_extension(x509.SubjectAlternativeName([_san(public_host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(key_path, _pem_key(key), 0o600)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o600)
    return Certificate(cert_path, key_path, door / CA_CERT)


def operator_certificate(cert: Path, key: Path, public_host: str) -> Certificate:
    """The operator's certificate and key, checked for the public name and dates."""
    for what, path in (("RCEA_TLS_CERT", cert), ("RCEA_TLS_KEY", key)):
        if not path.is_file() or not os.access(path, os.R_OK):
            raise TLSError(f"{what}={path}: no readable file there")
    try:
        loaded = x509.load_pem_x509_certificates(cert.read_bytes())[0]
    except ValueError as exc:
        raise TLSError(f"RCEA_TLS_CERT={cert}: not a PEM certificate ({exc})") from exc
    try:
        serialization.load_pem_private_key(key.read_bytes(), None)
    except (ValueError, TypeError) as exc:
        raise TLSError(f"RCEA_TLS_KEY={key}: not an unencrypted PEM private key ({exc})") from exc
    if not _covers(loaded, public_host):
        raise TLSError(
            f"RCEA_TLS_CERT={cert} is issued for {names_of(loaded) or 'no name'}, not for the "
            f"public name {public_host!r}"
        )
    if loaded.not_valid_after_utc <= _now():
        raise TLSError(f"RCEA_TLS_CERT={cert} expired on {loaded.not_valid_after_utc:%Y-%m-%d}")
    return Certificate(cert, key, None)


def certificate(
    door: Path, public_host: str, cert: Path | None = None, key: Path | None = None
) -> Certificate:
    """The operator's certificate when both files are set, else the local authority's."""
    if (cert is None) != (key is None):
        raise TLSError("set both RCEA_TLS_CERT and RCEA_TLS_KEY, or neither (a local CA)")
    if cert is not None and key is not None:
        return operator_certificate(Path(cert), Path(key), public_host)
    return local_certificate(door, public_host)
