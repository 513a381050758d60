"""How `pykueue serve` treats slow, broken and weak clients (issue 14, items 6 and 8): a real
`pykueue serve` subprocess on 127.0.0.1 and raw TLS sockets that trickle, stall or hang up.
The timeouts are shortened to 1 s through the environment so each test waits for a real close
within a bound, never sleeps and hopes."""

from __future__ import annotations

import os
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from certs.pki import ensure_certs
from tests.pykueue_server import PykueueServer, trickle_until_closed, trust

TIMEOUT = 1.0  # header and body timeouts given to the server under test (seconds)
# A closed connection must be seen within the timeout plus this much (a loaded 2-core host).
SLACK = 2.0


@pytest.fixture(scope="module")
def server(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PykueueServer]:
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    srv = PykueueServer(certs, log, env=dict(os.environ))
    srv.env.update(PYKUEUE_SERVER__HEADER_TIMEOUT_SECONDS=str(TIMEOUT),
                   PYKUEUE_SERVER__BODY_TIMEOUT_SECONDS=str(TIMEOUT))
    srv.start()
    yield srv
    srv.stop()


def tls_socket(server: PykueueServer, ctx: ssl.SSLContext | None = None) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return (ctx or trust(server.certs)).wrap_socket(raw, server_hostname="127.0.0.1")


def _forever(*parts: bytes) -> Iterator[bytes]:
    yield from parts
    while True:
        yield b"X-Slow: 1\r\n"


def test_headers_trickled_forever_are_cut_off_at_the_header_timeout(server):
    with tls_socket(server) as s:
        lived, got = trickle_until_closed(
            s, _forever(b"GET /healthz HTTP/1.1\r\n", b"Host: x\r\n"), 0.2, 20)
    assert got == b"" and lived < TIMEOUT + SLACK, (lived, got)


def test_a_connection_idle_after_the_handshake_is_closed(server):
    with tls_socket(server) as s:
        lived, got = trickle_until_closed(s, iter(()), 0.2, 20)
    assert got == b"" and lived < TIMEOUT + SLACK, (lived, got)


def test_slow_headers_of_a_second_request_on_a_kept_alive_connection_are_cut_off(server):
    with tls_socket(server) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while not first.endswith(b'{"status":"ok"}'):
            first += s.recv(65536)
        assert first.startswith(b"HTTP/1.1 200"), first
        lived, got = trickle_until_closed(s, _forever(b"GET /healthz HTTP/1.1\r\n"), 0.2, 20)
    assert got == b"" and lived < TIMEOUT + SLACK, (lived, got)


def test_a_body_at_one_byte_per_tick_gets_408_and_the_connection_closes(server):
    head = (b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n")

    def body() -> Iterator[bytes]:
        yield head
        while True:
            yield b" "

    with tls_socket(server) as s:
        lived, got = trickle_until_closed(s, body(), 0.2, 20)
    assert got.startswith(b"HTTP/1.1 408"), got
    assert b"not complete within 1 seconds" in got
    assert lived < TIMEOUT + SLACK, lived


def test_a_client_gone_mid_body_is_one_log_line_not_a_traceback(server):
    with tls_socket(server) as s:
        s.sendall(b"POST /mutate-batch-v1-job HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{\"a\": 1")
        time.sleep(0.3)  # let the server start reading the body before the hang-up
    deadline = time.monotonic() + 10
    while "client disconnected" not in server.log.read_text():
        assert time.monotonic() < deadline, server.log.read_text()
        time.sleep(0.1)
    text = server.log.read_text()
    lines = [ln for ln in text.splitlines() if "client disconnected" in ln]
    assert len(lines) == 1 and "/mutate-batch-v1-job" in lines[0]
    assert "Traceback" not in text and "Exception in ASGI application" not in text


def test_tls12_allows_only_aead_suites(server):
    cbc = ssl.create_default_context(cafile=str(server.certs / "ca.crt"))
    cbc.maximum_version = ssl.TLSVersion.TLSv1_2
    cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA384:"
                    "ECDHE-RSA-AES128-SHA256:ECDHE-RSA-AES256-SHA384:"
                    "ECDHE-ECDSA-AES128-SHA:ECDHE-RSA-AES128-SHA")
    with pytest.raises(ssl.SSLError):
        tls_socket(server, cbc).close()
    aead = ssl.create_default_context(cafile=str(server.certs / "ca.crt"))
    aead.maximum_version = ssl.TLSVersion.TLSv1_2
    aead.set_ciphers("ECDHE+AESGCM")
    with tls_socket(server, aead) as s:
        assert s.version() == "TLSv1.2" and "GCM" in s.cipher()[0]


def test_openapi_and_its_uis_are_off_by_default(server):
    import httpx

    ctx = trust(server.certs)
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(server.url + path, verify=ctx).status_code == 404, path
    assert httpx.get(server.url + "/healthz", verify=ctx).status_code == 200


# ------------------------------------------------------------------ extender callers (item 7)


@pytest.fixture(scope="module")
def mtls_server(certs: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[tuple[PykueueServer, Path]]:
    """`pykueue serve` verifying client certificates against a CA of their own, with a
    kube-scheduler certificate, an intruder's from the same CA and one from a foreign CA."""
    from certs.pki import ensure_client_cert

    clients = tmp_path_factory.mktemp("clients")
    ensure_certs(clients / "ca")
    ensure_client_cert(clients / "ca", "scheduler", "system:kube-scheduler")
    ensure_client_cert(clients / "ca", "intruder", "system:serviceaccount:evil:pod")
    ensure_client_cert(clients / "ca", "apiserver", WEBHOOK_CLIENT)
    ensure_certs(clients / "foreign")
    ensure_client_cert(clients / "foreign", "scheduler", "system:kube-scheduler")
    srv = PykueueServer(certs, tmp_path_factory.mktemp("mtls") / "serve.log",
                        env=dict(os.environ))
    srv.env["PYKUEUE_SERVER__CLIENT_CA_FILE"] = str(clients / "ca" / "ca.crt")
    srv.env["PYKUEUE_WEBHOOK__CLIENT_NAMES"] = f'["{WEBHOOK_CLIENT}"]'
    srv.start()
    yield srv, clients
    srv.stop()


def _filter(srv: PykueueServer, cert: Path | None) -> tuple[int, str]:
    import httpx

    ctx = trust(srv.certs)
    if cert is not None:
        ctx.load_cert_chain(str(cert.with_suffix(".crt")), str(cert.with_suffix(".key")))
    body = {"Pod": {"metadata": {"name": "p", "namespace": "n"}, "spec": {"containers": []}},
            "NodeNames": ["a", "b"]}
    r = httpx.post(srv.url + "/scheduler/filter", json=body, verify=ctx)
    return r.status_code, r.text


def test_extender_answers_only_kube_schedulers_client_certificate(mtls_server):
    srv, clients = mtls_server
    status, text = _filter(srv, clients / "ca" / "scheduler")
    assert status == 200 and '"NodeNames":["a","b"]' in text, text
    status, text = _filter(srv, None)
    assert status == 403 and "got no client certificate" in text, text
    status, text = _filter(srv, clients / "ca" / "intruder")
    assert status == 403 and "CN=system:serviceaccount:evil:pod" in text, text


WEBHOOK_CLIENT = "kube-apiserver-webhook-client"
# A review as a caller that is not kube-apiserver would forge it: pykueue's own identity lifting
# a Pod's admission gate.
FORGED = {
    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
    "request": {
        "uid": "forged-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "UPDATE", "namespace": "team-a", "name": "p",
        "userInfo": {"username": "system:serviceaccount:pykueue-system:pykueue"},
        "object": {"metadata": {"name": "p", "namespace": "team-a",
                                "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
                   "spec": {"containers": [{"name": "c", "image": "x"}]}},
        "oldObject": {"metadata": {"name": "p", "namespace": "team-a",
                                   "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
                      "spec": {"containers": [{"name": "c", "image": "x"}],
                               "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}},
    },
}


def _review(srv: PykueueServer, cert: Path | None) -> tuple[int, dict]:
    import httpx

    ctx = trust(srv.certs)
    if cert is not None:
        ctx.load_cert_chain(str(cert.with_suffix(".crt")), str(cert.with_suffix(".key")))
    r = httpx.post(srv.url + "/validate--v1-pod?timeout=5s", json=FORGED, verify=ctx)
    return r.status_code, r.json()


def test_webhooks_answer_only_the_api_servers_client_certificate(mtls_server):
    """webhook.client_names set: a forged review from a caller without kube-apiserver's
    certificate gets 403 and no answer about the object; kube-apiserver's gets the review."""
    srv, clients = mtls_server
    for cert, who in ((None, "got no client certificate"),
                      (clients / "ca" / "intruder", "CN=system:serviceaccount:evil:pod"),
                      (clients / "ca" / "scheduler", "CN=system:kube-scheduler")):
        status, body = _review(srv, cert)
        assert status == 403 and who in body["detail"], (cert, status, body)
        assert "response" not in body
    status, body = _review(srv, clients / "ca" / "apiserver")
    assert status == 200 and body["response"]["uid"] == "forged-1", body


def test_webhook_client_names_without_a_client_ca_are_refused():
    from pydantic import ValidationError

    from app.config import Settings

    with pytest.raises(ValidationError, match="webhook.client_names needs server.client_ca_file"):
        Settings(webhook={"client_names": [WEBHOOK_CLIENT]})


def test_a_client_certificate_of_another_ca_fails_the_handshake(mtls_server):
    import httpx

    srv, clients = mtls_server
    with pytest.raises(httpx.HTTPError):
        _filter(srv, clients / "foreign" / "scheduler")


def test_callers_without_a_certificate_still_reach_the_other_routes(mtls_server):
    import httpx

    srv, _ = mtls_server
    assert httpx.get(srv.url + "/healthz", verify=trust(srv.certs)).status_code == 200


def test_the_uvicorn_config_carries_the_limits_of_the_settings(certs):
    """What `pykueue serve` runs (app.serving.uvicorn_config): the settings' keep-alive and
    concurrency limits, the guarded protocol and the hardened TLS context."""
    import uvicorn

    from app.config import ServerSettings
    from app.serving import TLS12_CIPHERS, uvicorn_config

    server = ServerSettings(cert_file=certs / "tls.crt", key_file=certs / "tls.key",
                            keep_alive_seconds=7, limit_concurrency=9)
    config = uvicorn_config(object(), server)
    assert isinstance(config, uvicorn.Config)
    assert (config.timeout_keep_alive, config.limit_concurrency) == (7, 9)
    config.load()
    assert config.http_protocol_class.__name__ == "GuardedHTTPProtocol"
    assert config.ssl.minimum_version == ssl.TLSVersion.TLSv1_2
    assert config.ssl.verify_mode == ssl.CERT_NONE  # no client CA set: no certificate asked
    tls12 = {c["name"] for c in config.ssl.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 and all(("GCM" in n or "CHACHA20" in n) and n.startswith("ECDHE")
                         for n in tls12), tls12
    assert TLS12_CIPHERS == "ECDHE+AESGCM:ECDHE+CHACHA20"


# ------------------------------------------------------------- idle connections (breaker8)


@pytest.fixture(scope="module")
def small_server(certs: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[PykueueServer]:
    """`pykueue serve` with limit_concurrency 20 and timeouts long enough that no idle
    connection is cut by them during a test."""
    srv = PykueueServer(certs, tmp_path_factory.mktemp("small") / "serve.log",
                        env=dict(os.environ))
    srv.env.update(PYKUEUE_SERVER__LIMIT_CONCURRENCY="20",
                   PYKUEUE_SERVER__HEADER_TIMEOUT_SECONDS="60",
                   PYKUEUE_SERVER__BODY_TIMEOUT_SECONDS="60")
    srv.start()
    yield srv
    srv.stop()


def _request(s: ssl.SSLSocket, raw: bytes) -> bytes:
    s.sendall(raw)
    s.settimeout(10)
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


def _closed(socks: list[ssl.SSLSocket], within: float) -> int:
    """How many of ``socks`` the server closes (EOF or reset) within ``within`` seconds."""
    import select

    open_, closed = list(socks), 0
    deadline = time.monotonic() + within
    while open_ and time.monotonic() < deadline:
        ready, _, _ = select.select(open_, [], [], max(0.0, deadline - time.monotonic()))
        for s in ready:  # readable: a close, or TLS records without data (session tickets)
            s.settimeout(0.05)
            try:
                gone = s.recv(1) == b""
            except TimeoutError:
                continue
            except (ConnectionError, ssl.SSLError):
                gone = True
            open_.remove(s)
            closed += gone
    return closed


def test_idle_connections_cannot_hold_every_slot(small_server):
    """breaker8: 300 anonymous clients that only opened TLS connections (reconnecting when
    closed) held uvicorn's 256 slots: every webhook call, the extender and /healthz got 503.
    Idle connections now give way to newcomers; a request under way is never cut."""
    busy = tls_socket(small_server)
    busy.sendall(b"POST /mutate-batch-v1-job HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: 10\r\n\r\n{\"a\"")  # body under way
    time.sleep(0.2)  # its headers are read: a request cycle exists
    idle = [tls_socket(small_server) for _ in range(40)]
    try:
        with tls_socket(small_server) as s:
            answer = _request(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        answer = _request(busy, b':1}\r\n\r')  # the rest of its body: 10 bytes in all
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]  # not JSON: the webhook's 400
        assert _closed(idle, within=5) >= 20
    finally:
        busy.close()
        for s in idle:
            s.close()


# ------------------------------------------------------------- the visibility listener


@pytest.fixture(scope="module")
def two_listeners(certs: Path, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[PykueueServer, int, Path]]:
    """`pykueue serve` as the manifests run it (no client CA on the main port) with the
    visibility listener on a port of its own and a front-proxy CA of its own: kube-apiserver's
    proxy certificate (CN front-proxy-client) and a webhook client certificate of another CA
    (kube-apiserver presents one when its AdmissionConfiguration says so)."""
    from certs.pki import ensure_ca, ensure_leaf
    from tests.pykueue_server import free_port

    clients = tmp_path_factory.mktemp("front-proxy")
    ensure_ca(clients / "fp", common_name="front-proxy-ca")
    ensure_leaf(clients / "fp", "proxy", "front-proxy-client", server=False)
    ensure_ca(clients / "other", common_name="webhook-client-ca")
    ensure_leaf(clients / "other", "apiserver", WEBHOOK_CLIENT, server=False)
    srv = PykueueServer(certs, tmp_path_factory.mktemp("vis") / "serve.log",
                        env=dict(os.environ))
    port = free_port()
    srv.env.update(PYKUEUE_VISIBILITY__PORT=str(port),
                   PYKUEUE_VISIBILITY__REQUESTHEADER_CLIENT_CA_FILE=str(clients / "fp" / "ca.crt"))
    srv.start()
    yield srv, port, clients
    srv.stop()


def _get(url: str, certs: Path, cert: Path | None, user: bool = True):
    import httpx

    ctx = trust(certs)
    if cert is not None:
        ctx.load_cert_chain(str(cert.with_suffix(".crt")), str(cert.with_suffix(".key")))
    headers = {"X-Remote-User": "system:kube-aggregator"} if user else {}
    return httpx.get(url, headers=headers, verify=ctx)


def test_the_visibility_api_is_served_on_its_own_listener_only(two_listeners):
    """The main port does not serve the visibility paths, even to the front-proxy
    certificate; the visibility port serves them to it, 401 without it, refuses another
    CA's certificate in the handshake, and serves nothing else."""
    import httpx

    srv, port, clients = two_listeners
    proxy, foreign = clients / "fp" / "proxy", clients / "other" / "apiserver"
    vis = f"https://127.0.0.1:{port}"
    path = "/apis/visibility.kueue.x-k8s.io/v1beta2"
    for p in (path, "/openapi/v2"):
        assert _get(srv.url + p, srv.certs, proxy).status_code == 404, p
        r = _get(vis + p, srv.certs, proxy)
        assert r.status_code == 200, (p, r.text)
    assert r.json()["swagger"] == "2.0"
    assert _get(vis + path, srv.certs, proxy).json()["kind"] == "APIResourceList"
    r = _get(vis + path, srv.certs, None)
    assert r.status_code == 401 and "no client certificate" in r.json()["message"], r.text
    with pytest.raises(httpx.HTTPError):
        _get(vis + path, srv.certs, foreign)
    assert _get(vis + "/healthz", srv.certs, proxy).status_code == 404


def test_the_main_port_takes_any_client_certificate_as_without_the_visibility_api(
        two_listeners):
    """No client CA on the main port: no certificate is asked for, so kube-apiserver's
    webhook client certificate (another CA) cannot fail the handshake."""
    srv, _, clients = two_listeners
    r = _get(srv.url + "/healthz", srv.certs, clients / "other" / "apiserver")
    assert r.status_code == 200, r.text
    from app.config import ServerSettings
    from app.serving import tls_context

    server = ServerSettings(cert_file=srv.certs / "tls.crt", key_file=srv.certs / "tls.key")
    assert tls_context(server).verify_mode == ssl.CERT_NONE
    pem = (clients / "fp" / "ca.crt").read_text()
    assert tls_context(server, [pem]).verify_mode == ssl.CERT_OPTIONAL


def test_sigterm_stops_both_listeners_after_their_requests(certs, tmp_path):
    """The main listener owns SIGTERM; its shutdown stops the visibility listener too
    (uvicorn then ends the process with the signal it caught)."""
    from tests.pykueue_server import free_port

    srv = PykueueServer(certs, tmp_path / "serve.log", env=dict(os.environ))
    srv.env["PYKUEUE_VISIBILITY__PORT"] = str(free_port())
    srv.start()
    srv.stop()
    log = (tmp_path / "serve.log").read_text()
    assert log.count("Shutting down") == 2, log
    assert log.count("Finished server process") == 2, log
