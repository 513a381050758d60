"""hack/operators.py without a cluster: versions come from the tool modules, ports stay in the
lab's block, and the webhook certificate is one the training-operator's cert-controller v0.12
keeps (its checks, read from the module: RSA CA key in PKCS#1, CA valid for the DNS name
``training-operator-ca``, leaf for ``training-operator.kubeflow.svc`` with serverAuth) and the
API server accepts at https://127.0.0.1."""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.labfixture import ROOT

sys.path.insert(0, str(ROOT / "hack"))
import lab as labmod  # noqa: E402
import operators as ops  # noqa: E402


def test_versions_come_from_each_tool_module() -> None:
    assert {n: o.version for n, o in ops.OPERATORS.items()} == {
        "jobset": "v0.11.1", "training-operator": "v1.9.3", "mpi-operator": "v0.8.0",
        "kuberay": "v1.6.0", "lws": "v0.8.0",
        "trainer": "v2.2.0", "appwrapper": "v1.2.0", "spark-operator": "v2.5.0"}
    assert ops.OPERATORS["kuberay"].folder.name == "kuberay-v1.6.0"


def test_ports_stay_in_the_labs_block() -> None:
    lab = labmod.Lab(state=Path("/nonexistent"), port_base=18440, bin_dir=Path("/nonexistent"))
    ports = ops.ports(lab)
    own = {k: v for k, v in ports.items() if k != "mpi-health"}
    assert sorted(own.values()) == [*range(18460, 18468), *range(18470, 18476)]
    assert ports["mpi-health"] == 8080


def test_webhook_certificate_satisfies_the_training_operators_rotator(tmp_path: Path) -> None:
    lab = labmod.Lab(state=tmp_path, port_base=18440, bin_dir=tmp_path)
    d = ops.certs(lab)
    assert (d / "ca.key").read_text().startswith("-----BEGIN RSA PRIVATE KEY-----")  # PKCS#1
    ca = x509.load_pem_x509_certificate((d / "ca.crt").read_bytes())
    leaf = x509.load_pem_x509_certificate((d / "tls.crt").read_bytes())
    ca_sans = ca.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ca_sans.get_values_for_type(x509.DNSName) == ["training-operator-ca"]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "training-operator.kubeflow.svc" in sans.get_values_for_type(x509.DNSName)
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    leaf.verify_directly_issued_by(ca)
    before = (d / "tls.crt").read_bytes()
    assert ops.certs(lab) == d and (d / "tls.crt").read_bytes() == before  # made once per lab


def test_lab_down_stops_an_operators_companion_process(tmp_path: Path) -> None:
    """``hack/lab.py down`` stops the spark-operator's webhook process (a companion, not an
    operator of its own) as ``operators-down`` does: left running, it kept the lab's ports and
    answered the next lab's readiness probe with the old lab's certificate (readme14)."""
    import shutil
    import time

    (companion,) = ops.COMPANIONS["spark-operator"]
    exe = tmp_path / "bin" / companion
    exe.parent.mkdir()
    shutil.copy(shutil.which("sleep") or "/bin/sleep", exe)
    lab = labmod.Lab(state=tmp_path / "lab", port_base=18440, bin_dir=tmp_path / "bin")
    lab.state.mkdir()
    labmod._start(lab, companion, ["300"], exe=exe)
    deadline = time.monotonic() + 10  # /proc/<pid>/cmdline is empty for a moment after exec
    while (pid := labmod._pid(lab, companion)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid is not None
    assert any(name == companion for name, _ in ops.status(lab))
    labmod.down(lab)
    assert not Path(f"/proc/{pid}").exists() or \
        Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[-1].startswith("Z")
