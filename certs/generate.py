"""Generate pykueue's CA and serving certificate: ``python -m certs.generate --out certs/out``.

Idempotent: an existing valid CA is kept (registered caBundles stay valid) and the serving
certificate is only remade when it is missing, not signed by that CA, lacks a wanted SAN or
expires within 30 days. The logic lives in ``certs.pki``; see certs/README.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from certs.pki import default_hosts, ensure_certs, ensure_client_cert


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, ensure the certificates, print what was written; exit status 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("certs/out"), help="output directory")
    parser.add_argument(
        "--host", action="append", default=[], metavar="NAME_OR_IP",
        help="extra SAN (repeatable); the defaults are always included",
    )  # fmt: skip
    parser.add_argument("--service", default="pykueue-webhook-service", help="Service name")
    parser.add_argument("--namespace", default="pykueue-system", help="Service namespace")
    parser.add_argument("--cert-days", type=int, default=365, help="serving cert validity")
    parser.add_argument("--ca-days", type=int, default=3650, help="CA validity")
    parser.add_argument("--force", action="store_true", help="make a new CA and certificate")
    parser.add_argument(
        "--client", action="append", default=[], metavar="NAME=COMMON_NAME",
        help="also a client certificate NAME.crt/NAME.key for COMMON_NAME signed by the CA "
             "(repeatable), e.g. kube-scheduler-client=system:kube-scheduler",
    )  # fmt: skip
    args = parser.parse_args(argv)
    hosts = default_hosts(args.service, args.namespace) + list(args.host)
    paths = ensure_certs(
        args.out, hosts=hosts, ca_days=args.ca_days, cert_days=args.cert_days, force=args.force
    )
    created = list(paths.created)
    for spec in args.client:
        name, sep, cn = spec.partition("=")
        if not (name and sep and cn):
            parser.error(f"--client {spec!r}: want NAME=COMMON_NAME")
        created += ensure_client_cert(args.out, name, cn).created
    written = ", ".join(created) or "nothing (existing files are valid)"
    print(f"certs: {args.out}: wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
