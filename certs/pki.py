"""pykueue's one certificate generator: a private CA and certificates signed by it.

Used by ``python -m certs.generate`` (``make certs``: pykueue's HTTPS listener), by the lab
(``hack/lab.py``: kube-apiserver's, kwok's and the admin's certificates and the
service-account keys) and by tests and benchmarks. Not part of the runtime: ``app`` never
imports it (import-linter contract in pyproject.toml); ``pykueue serve`` only reads PEM files.

``ensure_certs(out_dir)`` writes, under ``out_dir``:

- ``ca.crt`` / ``ca.key``: a self-signed CA (ECDSA P-256, ``basicConstraints CA:TRUE,
  pathlen:0``, keyCertSign + cRLSign), valid ``ca_days`` (default 3650 days). Its PEM goes,
  base64-encoded, into the webhook configurations' ``caBundle`` (hack/render_webhooks.py).
- ``tls.crt`` / ``tls.key``: the serving certificate signed by that CA (ECDSA P-256,
  serverAuth), valid ``cert_days`` (default 365 days), with SANs ``127.0.0.1``, ``::1``,
  ``localhost`` and the in-cluster Service names of ``pykueue-webhook-service`` in
  ``pykueue-system`` (short, ``.ns``, ``.ns.svc``, ``.ns.svc.cluster.local``), plus any extra.
  kube-apiserver (Go) checks SANs only, never the CN.

``ensure_ca(out_dir)`` is the CA step alone. ``ensure_leaf(out_dir, name, common_name)`` adds
``<name>.crt`` / ``<name>.key`` signed by the CA in ``out_dir``: serverAuth with SANs, or
clientAuth with optional organizations (Kubernetes reads O as the user's groups, e.g.
``system:masters``). ``ensure_client_cert`` is the clientAuth case, e.g. the lab's
kube-scheduler presenting ``system:kube-scheduler`` to the extender (docs/security.md).
``ensure_signing_key_pair(out_dir, name)`` writes an RSA key pair ``<name>.key`` /
``<name>.pub`` (kube-apiserver's service-account token signing keys).

Idempotent: a readable CA that is valid for at least ``renew_before_days`` more days is kept
(so caBundles already registered stay valid); a leaf is kept when it is signed by that CA,
names the wanted subject, has every wanted SAN and is valid long enough; anything else is
(re)made. Keys are written with mode 0600, every file atomically (write + rename), and each
step holds ``out_dir/.lock`` (``flock``) so that concurrent callers agree on one CA.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import ipaddress
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE_NAME = "pykueue-webhook-service"
SERVICE_NAMESPACE = "pykueue-system"


def default_hosts(service: str = SERVICE_NAME, namespace: str = SERVICE_NAMESPACE) -> list[str]:
    """SANs of the serving certificate: loopback (lab) and the in-cluster Service names."""
    return [
        "127.0.0.1",
        "::1",
        "localhost",
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


@dataclass(frozen=True, slots=True)
class CertPaths:
    """Where the four PEM files are; ``created`` lists the ones (re)written by this call."""

    ca_cert: Path
    ca_key: Path
    cert: Path
    key: Path
    created: tuple[str, ...] = ()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@contextlib.contextmanager
def _locked(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir/.lock`` (``flock``, exclusive; made with ``out_dir``) while a step
    reads and writes the directory's files: two processes or threads that find no CA must
    not each make one, leaving ``ca.crt`` of one and ``tls.crt`` signed by the other (brk31
    L1: two test lanes starting on a fresh checkout). Not re-entrant: a step holding it
    calls only the private helpers."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(out_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def _write(path: Path, data: bytes, *, private: bool) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _san_entries(hosts: Iterable[str]) -> list[x509.GeneralName]:
    entries: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):  # de-duplicate, keep order
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return entries


def _load(cert_path: Path, key_path: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """Load a certificate and its EC key; ValueError when unreadable or not a matching pair."""
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{key_path}: not an EC private key")
    if cert.public_key() != key.public_key():
        raise ValueError(f"{cert_path} does not match {key_path}")
    return cert, key


def _valid_for(cert: x509.Certificate, days: int, now: dt.datetime) -> bool:
    return cert.not_valid_before_utc <= now and cert.not_valid_after_utc - now >= dt.timedelta(
        days=days
    )


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def cert_hosts(cert: x509.Certificate) -> set[str]:
    """The DNS names and IP addresses (as strings) in ``cert``'s subjectAltName."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return set(san.get_values_for_type(x509.DNSName)) | ips


def _normal_host(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    """digitalSignature (ECDSA TLS), plus keyCertSign and cRLSign for the CA."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def _make_ca(now: dt.datetime, days: int,
             common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _subject(common_name: str, organizations: Sequence[str]) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name(attrs)


def _make_leaf(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    hosts: Sequence[str],
    now: dt.datetime,
    days: int,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate for ``subject`` signed by the CA, extended key usage ``usage``
    (serverAuth or clientAuth), SANs ``hosts`` (none when empty)."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
    )
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName(_san_entries(hosts)),
                                        critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _ca(out_dir: Path, *, common_name: str, days: int, renew_before_days: int, force: bool,
        now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey, tuple[str, ...]]:
    """The CA in ``out_dir``, kept while readable and valid long enough, else (re)made; with
    the names of the files written."""
    ca_crt, ca_key = out_dir / "ca.crt", out_dir / "ca.key"
    if not force:
        try:
            cert, key = _load(ca_crt, ca_key)
            if _is_ca(cert) and _valid_for(cert, renew_before_days, now):
                return cert, key, ()
        except (OSError, ValueError, TypeError):
            pass
    out_dir.mkdir(parents=True, exist_ok=True)
    cert, key = _make_ca(now, days, common_name)
    _write(ca_key, _key_pem(key), private=True)
    _write(ca_crt, cert.public_bytes(serialization.Encoding.PEM), private=False)
    return cert, key, ("ca.crt", "ca.key")


def _leaf_is_current(crt: Path, key: Path, ca_cert: x509.Certificate, subject: x509.Name,
                     usage: x509.ObjectIdentifier, hosts: Sequence[str], renew_before_days: int,
                     now: dt.datetime) -> bool:
    try:
        leaf, _ = _load(crt, key)
        leaf.verify_directly_issued_by(ca_cert)
        usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except (OSError, ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):
        return False
    return (leaf.subject == subject and usage in usages
            and {_normal_host(h) for h in hosts} <= cert_hosts(leaf)
            and _valid_for(leaf, renew_before_days, now))


def _leaf(out_dir: Path, name: str, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
          subject: x509.Name, *, server: bool, hosts: Sequence[str], days: int,
          renew_before_days: int, force: bool, now: dt.datetime) -> tuple[str, ...]:
    """Keep or (re)make ``<name>.crt`` / ``<name>.key``; the names of the files written."""
    crt, key = out_dir / f"{name}.crt", out_dir / f"{name}.key"
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    if not force and _leaf_is_current(crt, key, ca[0], subject, usage, hosts,
                                      renew_before_days, now):
        return ()
    leaf, leaf_key = _make_leaf(ca[0], ca[1], subject, usage, hosts, now, days)
    _write(key, _key_pem(leaf_key), private=True)
    _write(crt, leaf.public_bytes(serialization.Encoding.PEM), private=False)
    return crt.name, key.name


def ensure_ca(out_dir: Path, *, common_name: str = "pykueue-ca", days: int = 3650,
              renew_before_days: int = 30, force: bool = False,
              now: dt.datetime | None = None) -> CertPaths:
    """Create or keep the CA ``ca.crt`` / ``ca.key`` in ``out_dir`` (see module docstring);
    ``cert``/``key`` of the result are the CA's files too. Raises OSError when ``out_dir``
    cannot be written."""
    with _locked(out_dir):
        _, _, created = _ca(out_dir, common_name=common_name, days=days,
                            renew_before_days=renew_before_days, force=force, now=now or _now())
    ca_crt, ca_key = out_dir / "ca.crt", out_dir / "ca.key"
    return CertPaths(ca_crt, ca_key, ca_crt, ca_key, created)


def ensure_leaf(out_dir: Path, name: str, common_name: str, *, server: bool,
                hosts: Sequence[str] = (), organizations: Sequence[str] = (), days: int = 365,
                renew_before_days: int = 30, force: bool = False,
                now: dt.datetime | None = None) -> CertPaths:
    """A certificate ``<name>.crt`` / ``<name>.key`` signed by the CA in ``out_dir`` (make it
    with ``ensure_ca`` first): subject CN ``common_name`` and O ``organizations`` (Kubernetes
    client certificates: user and groups), serverAuth when ``server`` else clientAuth, SANs
    ``hosts`` (IP literals become IP SANs), valid ``days`` (at most as long as the CA). Kept
    while current (see module docstring). Raises OSError/ValueError when the CA cannot be
    read."""
    now = now or _now()
    with _locked(out_dir):
        ca = _load(out_dir / "ca.crt", out_dir / "ca.key")
        created = _leaf(out_dir, name, ca, _subject(common_name, organizations), server=server,
                        hosts=list(hosts), days=days, renew_before_days=renew_before_days,
                        force=force, now=now)
    return CertPaths(out_dir / "ca.crt", out_dir / "ca.key", out_dir / f"{name}.crt",
                     out_dir / f"{name}.key", created)


def ensure_client_cert(out_dir: Path, name: str, common_name: str, *, days: int = 365,
                       renew_before_days: int = 30, now: dt.datetime | None = None) -> CertPaths:
    """A client certificate (clientAuth) for ``common_name`` signed by the CA in ``out_dir``
    (``ensure_certs`` first), written as ``<name>.crt`` / ``<name>.key`` and kept while it is
    signed by that CA, names ``common_name`` and is valid long enough. E.g. the lab's
    kube-scheduler presents ``system:kube-scheduler`` to the extender (docs/security.md).
    Raises OSError/ValueError when the CA cannot be read."""
    return ensure_leaf(out_dir, name, common_name, server=False, days=days,
                       renew_before_days=renew_before_days, now=now)


def ensure_signing_key_pair(out_dir: Path, name: str) -> tuple[Path, Path]:
    """An RSA-2048 key pair ``<name>.key`` (PKCS#8, mode 0600) / ``<name>.pub``
    (SubjectPublicKeyInfo PEM), kept when both exist and match: kube-apiserver's
    ``--service-account-signing-key-file`` / ``--service-account-key-file``. Returns
    (private, public) paths. Raises OSError when ``out_dir`` cannot be written."""
    priv, pub = out_dir / f"{name}.key", out_dir / f"{name}.pub"
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    with _locked(out_dir):
        try:
            key = serialization.load_pem_private_key(priv.read_bytes(), password=None)
            if key.public_key().public_bytes(serialization.Encoding.PEM, spki) \
                    == pub.read_bytes():
                return priv, pub
        except (OSError, ValueError, TypeError):
            pass
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write(priv, _key_pem(key), private=True)
        _write(pub, key.public_key().public_bytes(serialization.Encoding.PEM, spki),
               private=False)
    return priv, pub


def ensure_certs(
    out_dir: Path,
    *,
    hosts: Sequence[str] | None = None,
    ca_days: int = 3650,
    cert_days: int = 365,
    renew_before_days: int = 30,
    force: bool = False,
    now: dt.datetime | None = None,
) -> CertPaths:
    """Create or refresh the CA and serving certificate in ``out_dir`` (see module docstring).

    ``hosts``: SANs (IP literals become IP SANs), default ``default_hosts()``. ``force``: make a
    new CA and certificate even when the existing ones are good. ``now``: the clock (UTC).
    Returns the paths and which files were written. Raises OSError when ``out_dir`` cannot be
    written.
    """
    now = now or _now()
    wanted = list(hosts) if hosts is not None else default_hosts()
    with _locked(out_dir):
        ca_cert, ca_key, created = _ca(out_dir, common_name="pykueue-ca", days=ca_days,
                                       renew_before_days=renew_before_days, force=force, now=now)
        created += _leaf(out_dir, "tls", (ca_cert, ca_key), _subject(SERVICE_NAME, ()),
                         server=True, hosts=wanted, days=cert_days,
                         renew_before_days=renew_before_days, force=force or bool(created),
                         now=now)
    return CertPaths(out_dir / "ca.crt", out_dir / "ca.key", out_dir / "tls.crt",
                     out_dir / "tls.key", created)
