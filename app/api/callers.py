"""Who is calling: the verified TLS client certificate of a request, and the 403 for callers
that a route does not answer.

``app.serving`` asks every client for a certificate when ``Settings.server.client_ca_file`` is
set (``CERT_OPTIONAL``): one that does not chain to that CA fails the handshake, so a
certificate named in the request's ASGI TLS extension (``client_cert_name``, RFC 4514) has
been verified. Routes meant for one caller (the scheduler extender for kube-scheduler, the
admission webhooks for kube-apiserver) compare its subject common name with their list.
"""

from __future__ import annotations

import json

from fastapi import Request, Response


def common_name(rfc4514: str) -> str | None:
    """The CN of an RFC 4514 distinguished name (``CN=system:kube-scheduler,O=...``), with
    backslash escapes undone; None when there is none."""
    rdn, out, esc = [], [], False
    for ch in rfc4514 + ",":
        if esc:
            out.append(ch)
            esc = False
        elif ch == "\\":
            esc = True
        elif ch in ",+":
            rdn.append("".join(out))
            out = []
        else:
            out.append(ch)
    for attr in rdn:
        key, _, value = attr.partition("=")
        if key.strip().upper() == "CN":
            return value
    return None


def client_cert_name(request: Request) -> str | None:
    """The RFC 4514 subject of the request's verified client certificate, or None."""
    tls = (request.scope.get("extensions") or {}).get("tls") or {}
    name = tls.get("client_cert_name")
    return name if isinstance(name, str) and name else None


def refuse_unless_named(request: Request, allowed: list[str], what: str) -> Response | None:
    """None when the request's verified client certificate has a common name in ``allowed``;
    otherwise a 403 JSON ``{"detail": ...}`` naming ``what`` answers only them and what the
    caller presented. Call it before reading the body: a refused caller costs no parse."""
    name = client_cert_name(request)
    cn = common_name(name) if name else None
    if cn is not None and cn in allowed:
        return None
    who = f'client certificate "{name}"' if name else "no client certificate"
    body = {"detail": f"{what} answers only the client certificates with common name in "
                      f"{allowed}; got {who}"}
    return Response(json.dumps(body), status_code=403, media_type="application/json")
