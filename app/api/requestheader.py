"""Kubernetes request-header authentication: who a request proxied by kube-apiserver's
aggregation layer comes from (for ``app.api.visibility``).

kube-apiserver authenticates the user, then proxies the request over TLS with its front-proxy
client certificate (``--proxy-client-cert-file``) and the user in headers
(``--requestheader-username-headers`` etc.). An aggregated API server trusts those headers only
from a certificate issued by the request-header CA (``--requestheader-client-ca-file``) whose
common name is allowed (``--requestheader-allowed-names``, empty: any). kube-apiserver publishes
that configuration in the ConfigMap ``kube-system/extension-apiserver-authentication``; Kueue's
visibility server (Kubernetes' generic API server) reads it there, as ``load_request_header_auth``
does, unless ``VisibilitySettings.requestheader_client_ca_file`` names the CA.

Errors: ``Unauthenticated`` (the HTTP side answers 401) with the reason.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from cryptography import x509

from app.api.access import UserInfo
from app.config import Settings, VisibilitySettings
from app.kube.client import KubeClient

log = logging.getLogger(__name__)

CONFIGMAP_PATH = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"


class Unauthenticated(Exception):
    """The request is not one kube-apiserver's aggregation layer proxied (message: why)."""


@dataclass(frozen=True)
class RequestHeaderAuth:
    """Kubernetes request-header authentication (what kube-apiserver's
    ``--requestheader-*`` flags configure, published in
    ``kube-system/extension-apiserver-authentication``): ``cas`` may issue the proxy's client
    certificate, ``allowed_names`` its common names (empty: any), users come from the first
    non-empty ``username_headers``, groups from every value of ``group_headers``, extra from
    headers starting with one of ``extra_prefixes`` (key lower-cased and %-decoded)."""

    cas: tuple[x509.Certificate, ...]
    ca_pem: str
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)
    source: str = field(default="", compare=False)

    @classmethod
    def from_pem(cls, ca_pem: str, *, allowed_names: Iterable[str] = (),
                 username_headers: Iterable[str] = ("X-Remote-User",),
                 group_headers: Iterable[str] = ("X-Remote-Group",),
                 extra_prefixes: Iterable[str] = ("X-Remote-Extra-",),
                 source: str = "") -> RequestHeaderAuth:
        """Raises ``ValueError`` when ``ca_pem`` holds no certificate."""
        cas = tuple(x509.load_pem_x509_certificates(ca_pem.encode()))
        return cls(cas, ca_pem, tuple(allowed_names), tuple(username_headers),
                   tuple(group_headers), tuple(extra_prefixes), source)

    @classmethod
    def from_settings(cls, s: VisibilitySettings) -> RequestHeaderAuth | None:
        """From ``requestheader_client_ca_file`` (None when unset). Raises ``OSError`` /
        ``ValueError`` when the file cannot be read."""
        if s.requestheader_client_ca_file is None:
            return None
        path = s.requestheader_client_ca_file
        return cls.from_pem(path.read_text(), allowed_names=s.requestheader_allowed_names,
                            username_headers=s.requestheader_username_headers,
                            group_headers=s.requestheader_group_headers,
                            extra_prefixes=s.requestheader_extra_headers_prefix,
                            source=str(path))

    @classmethod
    def from_configmap(cls, data: Mapping[str, str]) -> RequestHeaderAuth | None:
        """From the ``data`` of ``extension-apiserver-authentication`` (None when it has no
        ``requestheader-client-ca-file``: kube-apiserver runs without the aggregation layer's
        flags). List values are JSON arrays, as kube-apiserver writes them."""
        pem = data.get("requestheader-client-ca-file")
        if not pem:
            return None

        def strings(key: str, default: Sequence[str]) -> list[str]:
            raw = data.get(key)
            if raw is None:
                return list(default)
            value = json.loads(raw)
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{key}: not a JSON array of strings")
            return value

        return cls.from_pem(pem, allowed_names=strings("requestheader-allowed-names", ()),
                            username_headers=strings("requestheader-username-headers",
                                                     ["X-Remote-User"]),
                            group_headers=strings("requestheader-group-headers",
                                                  ["X-Remote-Group"]),
                            extra_prefixes=strings("requestheader-extra-headers-prefix",
                                                   ["X-Remote-Extra-"]),
                            source="configmap kube-system/extension-apiserver-authentication")

    def issued(self, cert_pem: str) -> x509.Certificate | None:
        """The certificate when one of ``cas`` issued it directly (its signature checks), else
        None. Validity in time was checked by the TLS handshake."""
        try:
            cert = x509.load_pem_x509_certificate(cert_pem.encode())
        except ValueError:
            return None
        for ca in self.cas:
            try:
                cert.verify_directly_issued_by(ca)
            except Exception:  # noqa: BLE001 - InvalidSignature, ValueError, TypeError
                continue
            return cert
        return None

    def authenticate(self, cert_chain: Sequence[str], headers: Any) -> UserInfo:
        """The user a proxied request carries. ``cert_chain``: the verified client
        certificate chain as PEM (leaf first); ``headers``: Starlette ``Headers``. Raises a
        ``Unauthenticated`` when the certificate is missing, not issued by the request-header
        CA, not of an allowed name, or no user header is set."""
        if not cert_chain:
            raise Unauthenticated("Unauthorized: no client certificate; "
                              "this API is served to kube-apiserver's aggregation layer only")
        cert = self.issued(cert_chain[0])
        if cert is None:
            raise Unauthenticated("Unauthorized: the client certificate is "
                              "not issued by the request-header (front-proxy) CA")
        cns = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        cn = str(cns[0].value) if cns else ""
        if self.allowed_names and cn not in self.allowed_names:
            raise Unauthenticated(f'Unauthorized: client certificate common '
                              f'name "{cn}" is not in the request-header allowed names')
        username = ""
        for h in self.username_headers:
            username = (headers.get(h) or "").strip()
            if username:
                break
        if not username:
            raise Unauthenticated("Unauthorized: no user in "
                              f"{', '.join(self.username_headers)}")
        groups = tuple(g for h in self.group_headers for g in headers.getlist(h) if g)
        extra: dict[str, list[str]] = {}
        lowered = tuple(p.lower() for p in self.extra_prefixes)
        for name, value in headers.items():
            for prefix in lowered:
                if name.lower().startswith(prefix):
                    key = unquote(name[len(prefix):]).lower()
                    extra.setdefault(key, []).append(value)
        return UserInfo(username, "", groups, {k: tuple(v) for k, v in extra.items()})


async def load_request_header_auth(settings: VisibilitySettings,
                                   get: Callable[[str], Any] | None = None,
                                   ) -> RequestHeaderAuth | None:
    """The request-header configuration: from the settings' file, else from the ConfigMap
    through ``get`` (an async ``path -> object`` call, e.g. ``KubeClient.request`` bound to
    GET). None when the API is disabled or nothing can be read (logged: the visibility API
    then answers 503)."""
    if not settings.enabled:
        return None
    if settings.requestheader_client_ca_file is not None:
        return RequestHeaderAuth.from_settings(settings)
    if get is None:
        return None
    try:
        cm = await get(CONFIGMAP_PATH)
        auth = RequestHeaderAuth.from_configmap((cm or {}).get("data") or {})
    except Exception as exc:  # noqa: BLE001 - any failure: serve without the API, say why
        log.warning("visibility API off: cannot read %s (%s); set "
                    "PYKUEUE_VISIBILITY__REQUESTHEADER_CLIENT_CA_FILE or grant the Role "
                    "extension-apiserver-authentication-reader", CONFIGMAP_PATH, exc)
        return None
    if auth is None:
        log.warning("visibility API off: kube-apiserver publishes no requestheader-client-ca-file "
                    "(run it with --requestheader-client-ca-file for the aggregation layer)")
    return auth


async def request_header_auth_from_cluster(settings: Settings) -> RequestHeaderAuth | None:
    """``load_request_header_auth`` with a client of its own (``settings.client``), opened
    and closed here: `pykueue serve` calls it once before it listens."""
    if not settings.visibility.enabled or settings.visibility.requestheader_client_ca_file:
        return await load_request_header_auth(settings.visibility)
    try:
        client = await KubeClient.from_settings(settings.client)
    except Exception as exc:  # noqa: BLE001
        log.warning("visibility API off: no API client (%s)", exc)
        return None
    try:
        return await load_request_header_auth(
            settings.visibility, lambda path: client.request("GET", path))
    finally:
        await client.close()
