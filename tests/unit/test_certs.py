"""The certificate generator (certs/pki.py, certs/generate.py): SANs, chain, idempotency, TLS."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from certs.pki import (
    cert_hosts,
    default_hosts,
    ensure_ca,
    ensure_certs,
    ensure_leaf,
    ensure_signing_key_pair,
)

ROOT = Path(__file__).resolve().parents[2]
IN_CLUSTER = [
    "pykueue-webhook-service",
    "pykueue-webhook-service.pykueue-system",
    "pykueue-webhook-service.pykueue-system.svc",
    "pykueue-webhook-service.pykueue-system.svc.cluster.local",
]


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def contents(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    ensure_certs(directory)
    return directory


def test_serving_certificate_has_loopback_and_in_cluster_sans(out: Path) -> None:
    leaf = load(out / "tls.crt")
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in san.get_values_for_type(x509.IPAddress)
    assert {"localhost", *IN_CLUSTER} <= set(san.get_values_for_type(x509.DNSName))
    assert set(default_hosts()) == cert_hosts(leaf)


@pytest.mark.parametrize(
    "subject",
    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    + [x509.DNSName(name) for name in IN_CLUSTER],
    ids=lambda s: str(s.value),
)
def test_chain_verifies_for_every_name_the_api_server_may_use(
    out: Path, subject: x509.GeneralName
) -> None:
    ca, leaf = load(out / "ca.crt"), load(out / "tls.crt")
    verifier = (
        PolicyBuilder()
        .store(Store([ca]))
        .time(dt.datetime.now(dt.UTC))
        .build_server_verifier(subject)  # type: ignore[arg-type]
    )
    chain = verifier.verify(leaf, [])
    assert chain == [leaf, ca]


def test_chain_does_not_verify_for_an_unlisted_name(out: Path) -> None:
    ca, leaf = load(out / "ca.crt"), load(out / "tls.crt")
    verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(x509.DNSName("evil.test"))
    with pytest.raises(x509.verification.VerificationError):
        verifier.verify(leaf, [])


def test_ca_is_a_ca_and_leaf_is_not(out: Path) -> None:
    ca, leaf = load(out / "ca.crt"), load(out / "tls.crt")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    leaf.verify_directly_issued_by(ca)


def test_private_keys_are_readable_by_owner_only(out: Path) -> None:
    assert (out / "ca.key").stat().st_mode & 0o777 == 0o600
    assert (out / "tls.key").stat().st_mode & 0o777 == 0o600


def test_second_run_keeps_everything(tmp_path: Path) -> None:
    first = ensure_certs(tmp_path)
    before = contents(tmp_path)
    second = ensure_certs(tmp_path)
    assert first.created == ("ca.crt", "ca.key", "tls.crt", "tls.key")
    assert second.created == ()
    assert contents(tmp_path) == before


def test_new_san_keeps_the_ca_and_reissues_the_serving_certificate(tmp_path: Path) -> None:
    ensure_certs(tmp_path)
    ca_before = (tmp_path / "ca.crt").read_bytes()
    result = ensure_certs(tmp_path, hosts=[*default_hosts(), "webhook.example.test", "10.1.2.3"])
    assert result.created == ("tls.crt", "tls.key")
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    leaf = load(tmp_path / "tls.crt")
    assert {"webhook.example.test", "10.1.2.3"} <= cert_hosts(leaf)
    leaf.verify_directly_issued_by(load(tmp_path / "ca.crt"))


def test_serving_certificate_close_to_expiry_is_renewed_under_the_same_ca(tmp_path: Path) -> None:
    ensure_certs(tmp_path, cert_days=365)
    ca_before = (tmp_path / "ca.crt").read_bytes()
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=350)  # 15 days left < 30
    result = ensure_certs(tmp_path, now=later)
    assert result.created == ("tls.crt", "tls.key")
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    assert load(tmp_path / "tls.crt").not_valid_after_utc > later + dt.timedelta(days=300)


def test_expiring_ca_is_replaced_with_a_new_chain(tmp_path: Path) -> None:
    ensure_certs(tmp_path, ca_days=40)
    old_ca = load(tmp_path / "ca.crt")
    result = ensure_certs(tmp_path, now=dt.datetime.now(dt.UTC) + dt.timedelta(days=20))
    assert result.created == ("ca.crt", "ca.key", "tls.crt", "tls.key")
    assert load(tmp_path / "ca.crt").serial_number != old_ca.serial_number


@pytest.mark.parametrize("broken", ["ca.crt", "ca.key"])
def test_unreadable_ca_is_regenerated(tmp_path: Path, broken: str) -> None:
    ensure_certs(tmp_path)
    (tmp_path / broken).write_text("not a pem\n")
    result = ensure_certs(tmp_path)
    assert "ca.crt" in result.created
    load(tmp_path / "tls.crt").verify_directly_issued_by(load(tmp_path / "ca.crt"))


def test_serving_certificate_from_another_ca_is_reissued(tmp_path: Path) -> None:
    ensure_certs(tmp_path / "a")
    ensure_certs(tmp_path / "b")
    for name in ("tls.crt", "tls.key"):
        (tmp_path / "a" / name).write_bytes((tmp_path / "b" / name).read_bytes())
    assert ensure_certs(tmp_path / "a").created == ("tls.crt", "tls.key")
    load(tmp_path / "a" / "tls.crt").verify_directly_issued_by(load(tmp_path / "a" / "ca.crt"))


def test_mismatched_serving_key_is_reissued(tmp_path: Path) -> None:
    ensure_certs(tmp_path / "a")
    ensure_certs(tmp_path / "b")
    (tmp_path / "a" / "tls.key").write_bytes((tmp_path / "b" / "tls.key").read_bytes())
    assert ensure_certs(tmp_path / "a").created == ("tls.crt", "tls.key")


def test_force_makes_a_new_ca(tmp_path: Path) -> None:
    ensure_certs(tmp_path)
    before = contents(tmp_path)
    assert ensure_certs(tmp_path, force=True).created == ("ca.crt", "ca.key", "tls.crt", "tls.key")
    assert contents(tmp_path)["ca.crt"] != before["ca.crt"]


def test_command_line_entry_point_is_idempotent(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "certs.generate", "--out", str(tmp_path), "--host", "10.9.8.7"]
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    assert "wrote ca.crt, ca.key, tls.crt, tls.key" in first.stdout
    assert "wrote nothing" in second.stdout
    assert "10.9.8.7" in cert_hosts(load(tmp_path / "tls.crt"))


def test_python_tls_handshake_with_the_generated_files(out: Path) -> None:
    """What uvicorn does with ssl_certfile/ssl_keyfile, against a client trusting only ca.crt."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(out / "tls.crt", out / "tls.key")
    client_ctx = ssl.create_default_context(cafile=str(out / "ca.crt"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    names = ("127.0.0.1", "localhost")

    def serve() -> None:
        for _ in names:
            conn, _addr = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        for name in names:  # hostname (SAN) checking is on in the default client context
            with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
                with client_ctx.wrap_socket(raw, server_hostname=name) as tls:
                    assert tls.recv(2) == b"ok"
    finally:
        thread.join(timeout=5)
        listener.close()


# --- the lab's PKI (hack/lab.py) comes from the same generator -------------------------------


def test_lab_client_certificate_carries_the_groups_kubernetes_reads(tmp_path: Path) -> None:
    """kube-apiserver maps a client certificate's CN to the user and each O to a group
    (Kubernetes "X509 client certificates"): the lab's admin is in system:masters."""
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ensure_ca(tmp_path, common_name="pykueue-lab-ca")
    paths = ensure_leaf(tmp_path, "admin", "lab-admin", server=False,
                        organizations=["system:masters"])
    assert paths.created == ("admin.crt", "admin.key")
    leaf = load(paths.cert)
    leaf.verify_directly_issued_by(load(tmp_path / "ca.crt"))
    assert [a.value for a in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == [
        "lab-admin"]
    assert [a.value for a in leaf.subject.get_attributes_for_oid(
        NameOID.ORGANIZATION_NAME)] == ["system:masters"]
    usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert (tmp_path / "admin.key").stat().st_mode & 0o777 == 0o600
    # kept while current; another group is another subject, so it is remade
    assert ensure_leaf(tmp_path, "admin", "lab-admin", server=False,
                       organizations=["system:masters"]).created == ()
    assert ensure_leaf(tmp_path, "admin", "lab-admin", server=False).created == (
        "admin.crt", "admin.key")


def test_lab_serving_certificate_names_the_in_cluster_api_server(tmp_path: Path) -> None:
    hosts = ("localhost", "kubernetes.default.svc", "127.0.0.1", "10.0.0.1")
    ensure_ca(tmp_path)
    paths = ensure_leaf(tmp_path, "apiserver", "kube-apiserver", server=True, hosts=hosts)
    assert cert_hosts(load(paths.cert)) == set(hosts)
    assert ensure_leaf(tmp_path, "apiserver", "kube-apiserver", server=True,
                       hosts=hosts).created == ()
    # a wanted SAN the certificate lacks makes a new one
    more = ensure_leaf(tmp_path, "apiserver", "kube-apiserver", server=True,
                       hosts=(*hosts, "10.96.0.1"))
    assert more.created == ("apiserver.crt", "apiserver.key")


def test_leaf_without_a_ca_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        ensure_leaf(tmp_path, "x", "x", server=False)


def test_service_account_key_pair_is_made_once(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    priv, pub = ensure_signing_key_pair(tmp_path, "sa")
    before = contents(tmp_path)
    key = serialization.load_pem_private_key(priv.read_bytes(), password=None)
    assert key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ) == pub.read_bytes()
    assert priv.stat().st_mode & 0o777 == 0o600
    assert ensure_signing_key_pair(tmp_path, "sa") == (priv, pub)
    assert contents(tmp_path) == before
    pub.write_bytes(b"not a key")  # a pair that does not match is remade
    ensure_signing_key_pair(tmp_path, "sa")
    assert contents(tmp_path)["sa.pub"] != b"not a key"
