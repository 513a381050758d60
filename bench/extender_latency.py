"""Scheduler extender latency: filter and prioritize, 100 / 1,000 / 5,000 nodes, both modes.

Usage: ``.venv/bin/python bench/extender_latency.py [--sizes 100,1000,5000] [--out FILE]``

Starts ``pykueue``'s app (``create_app``) under uvicorn (httptools, uvloop) in a separate server
process on 127.0.0.1 over TLS, with an ``InMemoryExtenderState`` of 10,000 nodes (5,000
``pool=a100`` tainted ``pool=a100:NoSchedule`` with 8 GPUs, 5,000 ``pool=l4`` with 4 GPUs, a
third of them with GPUs in use). Serving certificate: ``certs/out/{tls.crt,tls.key,ca.crt}``
when present, else a throwaway CA + certificate from ``certs.pki.ensure_certs``. This process is
the client (``http.client``, one keep-alive connection, like kube-scheduler's extender client)
and times each request from send to the last byte of the response.

Per size and mode, ``floor`` first: ``POST /bench/echo`` (bench only) sends the largest request
and gets it back unparsed through the same process, TLS and uvicorn stack: the latency no
handler can go below (on this 2-core machine it decides whether a target is reachable).
Scenarios per size: ``names`` (``nodeCacheCapable: true``, NodeNames only) and ``nodes`` (full
Node objects of about 2 KB each, as kube-scheduler sends them); pods (2 GPUs):
``admitted-fit`` (Workload admitted to a100-flavor, candidates all a100 nodes: the usual case,
the injected nodeSelector already narrowed them), ``admitted-mixed`` (half the candidates are
l4 nodes and fail with a reason: nodeSelector injection off) and ``unmanaged`` (no Workload:
every node passes). Prints one JSON document: client-measured latency p50 / p99 / max in
milliseconds, request and response sizes, the server-measured share of requests within 2 ms and
the histogram bucket holding the server's p99 (from ``/metrics``), and the load average.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MAX_NODES = 5000  # per flavor: the store holds 5,000 a100 and 5,000 l4 nodes
SCENARIOS = ("admitted-fit", "admitted-mixed", "unmanaged")
GPU = "nvidia.com/gpu"


# ---------------------------------------------------------------------------- cluster data


def node_object(i: int, a100: bool) -> dict[str, Any]:
    """A kwok-like Node of about 2 KB: ``a100-<i>`` (8 GPUs, tainted) or ``l4-<i>`` (4 GPUs)."""
    name = f"{'a100' if a100 else 'l4'}-{i:05d}"
    gpus = "8" if a100 else "4"
    ts = "2026-01-01T00:00:00Z"
    return {
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": ts,
            "labels": {
                "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux", "kubernetes.io/role": "agent", "type": "kwok",
                "node.kubernetes.io/instance-type": "gpu-large" if a100 else "gpu-small",
                "topology.kubernetes.io/zone": f"zone-{i % 3}",
                "pool": "a100" if a100 else "l4",
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                            "kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": [{"key": "pool", "value": "a100", "effect": "NoSchedule"}]}
        if a100 else {},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: gpus},
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: gpus},
            "conditions": [
                {"type": t, "status": "False" if t != "Ready" else "True",
                 "lastHeartbeatTime": ts, "lastTransitionTime": ts, "reason": f"Kubelet{t}",
                 "message": f"kubelet reports {t}"}
                for t in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure",
                          "NetworkUnavailable")
            ],
            "addresses": [{"type": "InternalIP", "address": f"10.{i // 65536}.{i // 256 % 256}."
                                                            f"{i % 256}"},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "kwok",
                         "kernelVersion": "", "kubeProxyVersion": "fake",
                         "kubeletVersion": "fake", "machineID": "", "operatingSystem": "linux",
                         "osImage": "", "systemUUID": ""},
            "phase": "Running",
        },
    }


def pod_object(job: str | None, gpus: int = 2) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/podset": "main", "batch.kubernetes.io/job-name": job} if job else {}
    meta: dict[str, Any] = {"name": f"{job or 'web'}-0-abcde", "namespace": "research",
                            "uid": "11111111-2222-3333-4444-555555555555", "labels": labels}
    if job:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                    "uid": "j", "controller": True, "blockOwnerDeletion": True}]
    return {
        "metadata": meta,
        "spec": {
            "containers": [{"name": "train", "image": "registry.example/train:1",
                            "resources": {"requests": {"cpu": "4", "memory": "16Gi",
                                                       GPU: str(gpus)},
                                          "limits": {GPU: str(gpus)}}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}],
            "nodeSelector": {"pool": "a100"} if job else {},
            "schedulerName": "default-scheduler",
        },
        "status": {"phase": "Pending"},
    }


# ----------------------------------------------------------------------------------- server


def build_app():
    """The real app with an in-memory extender state of ``MAX_NODES`` nodes."""
    from app.config import ServerSettings, Settings
    from app.core.workload import Toleration
    from app.extender.nodestore import InMemoryExtenderState, NodeStore
    from app.extender.placement import FlavorView, PodWorkloadView
    from app.main import create_app

    a100 = FlavorView.of("a100-flavor", {"pool": "a100"},
                         [Toleration(key="pool", value="a100", effect="NoSchedule")])
    l4 = FlavorView.of("l4-flavor", {"pool": "l4"})
    store = NodeStore(GPU)
    for i in range(MAX_NODES):
        for a100_node in (True, False):
            store.add(node_object(i, a100_node))
            if i % 3 == 0:  # some GPUs in use
                p = pod_object("busy")
                p["metadata"]["uid"] = f"busy-{i}-{a100_node}"
                p["spec"]["nodeName"] = node_object(i, a100_node)["metadata"]["name"]
                p["status"]["phase"] = "Running"
                store.upsert_pod(p)
    state = InMemoryExtenderState(nodes=store, known_flavors=(a100, l4))
    state.set_workload("research", "train", PodWorkloadView(
        "research/job-train-abc12", True, "", {"main": (a100,)}))
    # Full Node objects for 5,000 nodes are ~12 MB: above the default 8 MiB body cap
    # (Settings.server.max_body_bytes), which a cluster using nodeCacheCapable: false must raise.
    # /metrics is read without a token: the bench measures the extender, not access reviews.
    settings = Settings(controllers_enabled=False, server=ServerSettings(metrics_auth=False))
    settings.server.max_body_bytes = 64 * 1024 * 1024
    app = create_app(settings)
    app.state.extender_state = state
    return app


FLOOR_PATH = "/bench/echo"


def with_echo_floor(app):
    """``app`` plus ``POST /bench/echo`` (bench only, raw ASGI): reads the whole body and sends
    it back unparsed. Same process, TLS and uvicorn stack as the extender, no work: the floor
    under any handler's latency for a request and response of that size."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope.get("path") != FLOOR_PATH:
            await app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return wrapped


def serve(port: int, cert: str, key: str) -> None:
    import uvicorn

    sys.path.insert(0, str(ROOT))
    app = with_echo_floor(build_app())
    gc.freeze()  # as pykueue does once its informers have synced (app.controllers.manager)
    uvicorn.run(app, host="127.0.0.1", port=port, ssl_certfile=cert, ssl_keyfile=key,
                http="httptools", loop="uvloop", access_log=False, log_level="warning")


def throwaway_certs(directory: Path) -> tuple[str, str, str]:
    """(ca, cert, key) paths of a fresh CA and serving certificate for 127.0.0.1."""
    from certs.pki import ensure_certs

    paths = ensure_certs(directory, hosts=["127.0.0.1"], ca_days=1, cert_days=1,
                         renew_before_days=0)
    return str(paths.ca_cert), str(paths.cert), str(paths.key)


# ----------------------------------------------------------------------------------- client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    def __init__(self, port: int, ca: str) -> None:
        ctx = ssl.create_default_context(cafile=ca)
        self.conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)

    def get(self, path: str) -> bytes:
        self.conn.request("GET", path)
        return self.conn.getresponse().read()

    def post(self, path: str, body: bytes) -> tuple[int, bytes, float]:
        t0 = time.perf_counter()
        self.conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        data = resp.read()
        return resp.status, data, time.perf_counter() - t0


def server_buckets(client: Client, verb: str, mode: str) -> dict[float, float]:
    """Cumulative counts of the server's ``pykueue_extender_request_duration_seconds``
    histogram for ``verb``/``mode``: upper bound (seconds) -> requests at or below it."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[float, float] = {}
    for family in text_string_to_metric_families(client.get("/metrics").decode()):
        if family.name != "pykueue_extender_request_duration_seconds":
            continue
        for sample in family.samples:
            labels = sample.labels
            if (sample.name.endswith("_bucket") and labels.get("verb") == verb
                    and labels.get("mode") == mode):
                out[float(labels["le"])] = sample.value
    return out


def server_side(before: dict[float, float], after: dict[float, float]) -> dict[str, Any]:
    """Server-measured share of requests within 2 ms and the bucket bound holding the p99."""
    delta = {le: after.get(le, 0) - before.get(le, 0) for le in after}
    total = delta.get(float("inf"), 0)
    if not total:
        return {}
    p99_bound = next(le for le in sorted(delta) if delta[le] >= 0.99 * total)
    return {"server_share_le_2ms": round(delta.get(0.002, 0) / total, 3),
            "server_p99_le_ms": p99_bound * 1000}


def pct(sorted_ms: list[float], q: float) -> float:
    idx = min(len(sorted_ms) - 1, max(0, round(q * len(sorted_ms)) - 1))
    return round(sorted_ms[idx], 3)


def run(sizes: list[int], port: int, ca: str) -> dict[str, Any]:
    client = Client(port, ca)
    deadline = time.time() + 60
    while True:
        try:
            status, _, _ = client.post("/scheduler/filter", json.dumps(
                {"Pod": pod_object(None), "NodeNames": ["x"]}).encode())
            if status == 200:
                break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)
            client = Client(port, ca)
    a100 = [node_object(i, True) for i in range(MAX_NODES)]
    l4 = [node_object(i, False) for i in range(MAX_NODES)]
    results = []
    for size in sizes:
        for mode in ("names", "nodes"):
            for verb in ("floor", "filter", "prioritize"):
                for scenario in SCENARIOS:
                    if verb == "floor" and scenario != "admitted-fit":
                        continue  # one floor per size and mode: the largest request
                    if verb == "prioritize" and scenario != "admitted-fit":
                        continue  # the score does not depend on the Workload
                    p = pod_object(None if scenario == "unmanaged" else "train")
                    if scenario == "admitted-mixed":
                        nodes = a100[: size // 2] + l4[: size - size // 2]
                    else:
                        nodes = a100[:size]
                    if mode == "names":
                        args = {"Pod": p, "Nodes": None,
                                "NodeNames": [n["metadata"]["name"] for n in nodes[:size]]}
                    else:
                        args = {"Pod": p, "Nodes": {"metadata": {}, "items": nodes[:size]},
                                "NodeNames": None}
                    body = json.dumps(args).encode()
                    count = 400 if mode == "names" else max(40, min(400, 200_000 // size))
                    path = FLOOR_PATH if verb == "floor" else f"/scheduler/{verb}"
                    for _ in range(max(20, count // 10)):  # warm-up
                        client.post(path, body)
                    before = server_buckets(client, verb, mode)
                    samples = []
                    resp_size = 0
                    for _ in range(count):
                        status, data, secs = client.post(path, body)
                        assert status == 200, data[:200]
                        samples.append(secs * 1000)
                        resp_size = len(data)
                    samples.sort()
                    results.append({
                        "nodes": size, "mode": mode, "verb": verb,
                        "pod": "-" if verb == "floor" else scenario,
                        "requests": count, "p50_ms": pct(samples, 0.50),
                        "p99_ms": pct(samples, 0.99), "max_ms": round(samples[-1], 3),
                        "request_bytes": len(body), "response_bytes": resp_size,
                        **server_side(before, server_buckets(client, verb, mode)),
                    })
                    print(json.dumps(results[-1]), file=sys.stderr)
    return {"transport": "https (TLS 1.3, loopback, keep-alive)", "loadavg": os.getloadavg(),
            "cpus": os.cpu_count(), "results": results, "targets": targets(results)}


TARGETS_MS = {"names": 2.0, "nodes": 50.0}  # issue 7: p99 at 5,000 nodes


def targets(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 7's targets at 5,000 nodes: per mode the worst p99 of the filter and prioritize
    rows against the target, next to the echo floor's p99 (what no handler can beat here)."""
    out: dict[str, Any] = {}
    if not any(r["nodes"] == 5000 for r in results):
        return {"note": "issue 7's targets are for 5,000 nodes: run with --sizes ...,5000"}
    for mode, target in TARGETS_MS.items():
        rows = [r for r in results if r["nodes"] == 5000 and r["mode"] == mode]
        served = [r for r in rows if r["verb"] != "floor"]
        if not served:
            continue
        worst = max(served, key=lambda r: r["p99_ms"])
        floor = next((r["p99_ms"] for r in rows if r["verb"] == "floor"), None)
        out[mode] = {"target_p99_ms": target, "worst_p99_ms": worst["p99_ms"],
                     "worst": f"{worst['verb']} {worst['pod']}", "floor_p99_ms": floor,
                     "met": worst["p99_ms"] <= target,
                     "floor_within_target": floor is not None and floor <= target}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,5000")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--cert", help=argparse.SUPPRESS)
    ap.add_argument("--key", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.serve, a.cert, a.key)
        return
    out_dir = ROOT / "certs" / "out"
    with tempfile.TemporaryDirectory() as tmp:
        if all((out_dir / f).exists() for f in ("ca.crt", "tls.crt", "tls.key")):
            ca, cert, key = (str(out_dir / f) for f in ("ca.crt", "tls.crt", "tls.key"))
            cert_source = "certs/out"
        else:
            ca, cert, key = throwaway_certs(Path(tmp))
            cert_source = "throwaway (certs.pki.ensure_certs)"
        port = free_port()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--cert", cert,
                                   "--key", key], env=env, cwd=ROOT)
        try:
            report = run([int(s) for s in a.sizes.split(",")], port, ca)
        finally:
            server.terminate()
            server.wait(timeout=10)
    report["certificate"] = cert_source
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
