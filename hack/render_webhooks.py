#!/usr/bin/env python3
"""Render pykueue's webhook configurations with the CA bundle (and, for the lab, the port).

    .venv/bin/python hack/render_webhooks.py --variant lab --port 9443      # -> .lab/webhooks.yaml
    .venv/bin/python hack/render_webhooks.py --variant cluster    # -> .lab/webhooks-cluster.yaml

Reads manifests/webhook/webhooks-lab.yaml (``url: https://127.0.0.1:9443/...``) or
manifests/webhook/webhooks.yaml (Service reference), sets every ``webhooks[].clientConfig.caBundle``
to base64 of the CA PEM (default certs/out/ca.crt) and, for the lab, rewrites each URL to
``https://<host>:<port><path>``. ``--unlabelled`` renders what the overlay
manifests/overlays/unlabelled-jobs does to the cluster variant: the webhooks of every job kind
(Job, Pod, Deployment, StatefulSet, LeaderWorkerSet, JobSet, the Kubeflow kinds, MPIJob,
RayJob, RayCluster, RayService, TrainJob, AppWrapper, SparkApplication) lose their
objectSelector (they see unlabelled objects, for ``jobs.manage_jobs_without_queue_name``) and
exclude kube-system and pykueue-system. Writes multi-document YAML ready for ``kubectl apply -f``.
Exit status 2 with a message when the CA file is missing or not a PEM certificate.
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import yaml

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = {
    "lab": ROOT / "manifests/webhook/webhooks-lab.yaml",
    "cluster": ROOT / "manifests/webhook/webhooks.yaml",
}
OUTPUTS = {"lab": ROOT / ".lab/webhooks.yaml", "cluster": ROOT / ".lab/webhooks-cluster.yaml"}


# The webhooks that see objects without a queue name under --unlabelled, and the namespaces
# they never see (Kueue's default managedJobsNamespaceSelector; keep in step with
# manifests/overlays/unlabelled-jobs and jobs.managed_jobs_namespace_selector).
UNLABELLED_WEBHOOKS = frozenset(f"{verb}{kind}.pykueue.io" for verb in "mv"
                                for kind in ("job", "pod", "deployment", "statefulset",
                                             "jobset", "pytorchjob", "tfjob", "xgboostjob",
                                             "paddlejob", "jaxjob", "mpijob", "rayjob",
                                             "raycluster", "rayservice", "leaderworkerset",
                                             "trainjob", "appwrapper",
                                             "sparkapplication"))
SYSTEM_NAMESPACES = {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                           "operator": "NotIn",
                                           "values": ["kube-system", "pykueue-system"]}]}


def render(
    template: str, ca_pem: bytes, *, host: str | None = None, port: int | None = None,
    unlabelled: bool = False,
) -> str:
    """The template's documents with caBundle set and, when ``host``/``port`` are given, every
    ``clientConfig.url`` pointed at them (path kept); ``unlabelled``: the webhooks of
    ``UNLABELLED_WEBHOOKS`` without objectSelector, outside the system namespaces."""
    ca_bundle = base64.b64encode(ca_pem).decode("ascii")
    documents = [d for d in yaml.safe_load_all(template) if d]
    for document in documents:
        for webhook in document.get("webhooks", []):
            if unlabelled and webhook.get("name") in UNLABELLED_WEBHOOKS:
                webhook.pop("objectSelector", None)
                webhook["namespaceSelector"] = SYSTEM_NAMESPACES
            client = webhook["clientConfig"]
            client["caBundle"] = ca_bundle
            if "url" in client and (host is not None or port is not None):
                url = urlsplit(client["url"])
                netloc = f"{host or url.hostname}:{port or url.port}"
                client["url"] = urlunsplit(("https", netloc, url.path, "", ""))
    return yaml.safe_dump_all(documents, sort_keys=False)


def main(argv: list[str] | None = None) -> int:
    """Command line entry; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=sorted(TEMPLATES), default="lab")
    parser.add_argument("--ca", type=Path, default=ROOT / "certs/out/ca.crt", help="CA PEM file")
    parser.add_argument("--host", default=None, help="lab: webhook host (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="lab: webhook port (default 9443)")
    parser.add_argument("--out", type=Path, default=None, help="output file")
    parser.add_argument("--unlabelled", action="store_true",
                        help="every job kind's webhooks see unlabelled objects")
    args = parser.parse_args(argv)
    try:
        ca_pem = args.ca.read_bytes()
    except OSError as exc:
        print(
            f"render_webhooks: cannot read CA {args.ca}: {exc}; run `make certs`", file=sys.stderr
        )
        return 2
    if b"-----BEGIN CERTIFICATE-----" not in ca_pem:
        print(f"render_webhooks: {args.ca} is not a PEM certificate", file=sys.stderr)
        return 2
    text = render(TEMPLATES[args.variant].read_text(), ca_pem, host=args.host, port=args.port,
                  unlabelled=args.unlabelled)
    out = args.out or OUTPUTS[args.variant]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"render_webhooks: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
