#!/usr/bin/env python3
"""Issue 14's attacks, rerun against a real `pykueue serve` on 127.0.0.1; JSON on stdout.

    .venv/bin/python bench/attack.py                      # items 2, 3 and 6
    .venv/bin/python bench/attack.py --only flood,slow    # without the lab (item 3 needs it)
    .venv/bin/python bench/attack.py --source /tmp/old    # the same against another checkout

Each attack starts its own `pykueue serve` (fresh certificates in bench/out/attack, logs there)
and stops it at the end. ``--source DIR`` runs the ``app`` package of DIR (e.g. an older
commit from ``git archive``) with this interpreter, for before/after figures.

- ``flood`` (item 2): twelve ~4.9 MiB POSTs to ``/scheduler/filter`` of tiny distinct Nodes
  (full-Node mode, no client CA so the parse cache is what is measured). Reports the server's
  peak RSS (``VmHWM``, MiB), its RSS after the flood and the answer codes.
- ``tokens`` (item 3): a pykueue with controllers and Lease leader election against the lab's
  kube-apiserver (``LAB_STATE_DIR``, default .lab; started with ``hack/lab.py up`` if needed),
  then 3,000 status API requests with random bearer tokens, ``--parallel`` (100) in flight.
  The Lease is read every 0.25 s with the lab admin's certificate: reports the longest gap
  between renewals (``spec.renewTime``, seconds; the retry period is 2 s, the renew deadline
  10 s), whether the holder changed, and the answer codes. Run twice: with the default
  per-client limit, and with it lifted (``PYKUEUE_ACCESS_REVIEW__PER_CLIENT_*``) so every
  token is reviewed (``--variants limited`` or ``unlimited`` for one of them: a checkout
  older than issue 14 has no per-client limit, the two are the same there).
- ``slow`` (item 6): how long the server keeps a connection that is idle after the TLS
  handshake, one that trickles a header line every 2 s, one that sends a body byte every
  2 s, and one that never starts TLS (measured up to ``--cap`` seconds, default 100).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import secrets
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "attack"
sys.path.insert(0, str(ROOT))


# --------------------------------------------------------------------------------- the server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`pykueue serve` from ``source`` (a directory holding ``app``) with ``env`` added."""

    def __init__(self, name: str, source: Path, env: dict[str, str]) -> None:
        from certs.pki import ensure_certs

        self.certs = ensure_certs(OUT / "certs")
        self.port = free_port()
        self.log = OUT / f"{name}.log"
        self.url = f"https://127.0.0.1:{self.port}"
        self.ctx = ssl.create_default_context(cafile=str(self.certs.ca_cert))
        full = {k: v for k, v in os.environ.items() if not k.startswith("PYKUEUE_")}
        full.update(PYTHONPATH=str(source), PYKUEUE_SERVER__HOST="127.0.0.1",
                    PYKUEUE_SERVER__PORT=str(self.port),
                    PYKUEUE_SERVER__CERT_FILE=str(self.certs.cert),
                    PYKUEUE_SERVER__KEY_FILE=str(self.certs.key),
                    PYKUEUE_SERVER__CA_FILE=str(self.certs.ca_cert),
                    PYKUEUE_CONTROLLERS_ENABLED="false")
        full.update(env)
        code = "import sys; from app.cli import app; sys.argv = ['pykueue', 'serve']; app()"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=source, env=full,
                                         stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"pykueue serve did not start:\n{self.log.read_text()}")
            try:
                if httpx.get(self.url + "/healthz", verify=self.ctx).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)

    def status(self, field: str) -> int:
        """A ``/proc/<pid>/status`` field in KiB (VmRSS, VmHWM)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        return 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --------------------------------------------------------------------------------- item 2


def flood_body(batch: int, size: int = int(4.9 * 1024 * 1024)) -> bytes:
    head = b'{"Pod":{"metadata":{"name":"p","namespace":"n"},"spec":{"containers":[]}},' \
           b'"Nodes":{"items":['
    parts, total, i = [], len(head) + 4, 0
    while total < size:
        item = b'{"metadata":{"name":"f%d-%d"}}' % (batch, i)
        parts.append(item)
        total += len(item) + 1
        i += 1
    return head + b",".join(parts) + b"]}}"


def attack_flood(source: Path) -> dict[str, Any]:
    srv = Server("flood", source, {})
    try:
        base = srv.status("VmRSS")
        peak = [base]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.05):
                peak[0] = max(peak[0], srv.status("VmRSS"))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        codes: Counter[int] = Counter()
        t0 = time.monotonic()
        with httpx.Client(verify=srv.ctx, timeout=120) as c:
            for batch in range(12):
                r = c.post(srv.url + "/scheduler/filter", content=flood_body(batch),
                           headers={"content-type": "application/json"})
                codes[r.status_code] += 1
        seconds = time.monotonic() - t0
        time.sleep(1.0)
        done.set()
        sampler.join()
        return {"posts": 12, "post_mib": 4.9, "codes": dict(codes), "seconds": round(seconds, 1),
                "rss_before_mib": round(base / 1024, 1),
                "peak_rss_mib": round(max(peak[0], srv.status("VmHWM")) / 1024, 1),
                "rss_after_mib": round(srv.status("VmRSS") / 1024, 1)}
    finally:
        srv.stop()


# --------------------------------------------------------------------------------- item 3


def _lab() -> Any:
    sys.path.insert(0, str(ROOT / "hack"))
    import lab as labmod  # noqa: PLC0415 - hack/ is not a package

    return labmod.from_args(None, None, None)


class LeaseWatch:
    """Reads a Lease every ``every`` seconds with the lab admin's client certificate and keeps
    (seen at, renewTime, holder) of each change."""

    def __init__(self, kubeconfig: Path, namespace: str, name: str, every: float = 0.25):
        cfg = json.loads(kubeconfig.read_text())
        cluster, user = cfg["clusters"][0]["cluster"], cfg["users"][0]["user"]
        ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
        ctx.load_cert_chain(user["client-certificate"], user["client-key"])
        self.client = httpx.Client(base_url=cluster["server"], verify=ctx, timeout=5)
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.every = every
        self.changes: list[tuple[float, float, str]] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from datetime import datetime

        last = None
        while not self.stop_event.wait(self.every):
            try:
                r = self.client.get(self.path)
            except httpx.HTTPError:
                continue
            if r.status_code != 200:
                continue
            spec = r.json().get("spec") or {}
            renew = spec.get("renewTime")
            if renew and renew != last:
                last = renew
                t = datetime.fromisoformat(renew.replace("Z", "+00:00")).timestamp()
                self.changes.append((time.monotonic(), t, spec.get("holderIdentity", "")))

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join()
        self.client.close()


def _token_flood(srv: Server, n: int, parallel: int) -> Counter[int]:
    """``n`` GETs with random tokens from ``parallel`` threads; answer codes (0: none)."""
    codes: Counter[int] = Counter()

    def one(c: httpx.Client) -> int:
        try:
            return c.get(srv.url + "/api/v1/clusterqueues",
                         headers={"Authorization": f"Bearer {secrets.token_hex(24)}"}).status_code
        except httpx.HTTPError:
            return 0

    with httpx.Client(verify=srv.ctx, timeout=120,
                      limits=httpx.Limits(max_connections=parallel)) as c, \
            cf.ThreadPoolExecutor(parallel) as pool:
        for code in pool.map(lambda _i: one(c), range(n)):
            codes[code] += 1
    return codes


def attack_tokens(source: Path, per_client_limit: bool, n: int = 3000,
                  parallel: int = 100) -> dict[str, Any]:
    lab = _lab()
    if subprocess.run([sys.executable, str(ROOT / "hack" / "lab.py"), "status"],
                      capture_output=True).returncode != 0:
        subprocess.run([sys.executable, str(ROOT / "hack" / "lab.py"), "up"], check=True,
                       capture_output=True)
    lease = f"attack-{secrets.token_hex(3)}"
    env = {"PYKUEUE_CONTROLLERS_ENABLED": "true",
           "PYKUEUE_CLIENT__KUBECONFIG": str(lab.kubeconfig),
           "PYKUEUE_LEADER_ELECTION__ENABLED": "true",
           "PYKUEUE_LEADER_ELECTION__NAMESPACE": "default",
           "PYKUEUE_LEADER_ELECTION__LEASE_NAME": lease}
    if not per_client_limit:
        env.update(PYKUEUE_ACCESS_REVIEW__PER_CLIENT_QPS="100000",
                   PYKUEUE_ACCESS_REVIEW__PER_CLIENT_BURST="1000000")
    srv = Server("tokens" + ("" if per_client_limit else "-unlimited"), source, env)
    watch = LeaseWatch(lab.kubeconfig, "default", lease)
    try:
        deadline = time.monotonic() + 60
        while not watch.changes:
            if time.monotonic() > deadline:
                raise SystemExit(f"no Lease {lease} within 60 s:\n{srv.log.read_text()[-3000:]}")
            time.sleep(0.2)
        time.sleep(5)  # a few normal renewals first
        start = time.monotonic()
        print(f"attack: {n} random tokens, {parallel} in flight ...", file=sys.stderr)
        codes = _token_flood(srv, n, parallel)
        flood_s = time.monotonic() - start
        print(f"attack: flood over in {flood_s:.0f}s: {dict(codes)}", file=sys.stderr)
        time.sleep(12)  # renewals that were queued behind the flood land by now
        during = [(seen, renew, holder) for seen, renew, holder in watch.changes
                  if seen >= start - 2.5]
        gaps = [b[1] - a[1] for a, b in zip(during, during[1:], strict=False)]
        # Up to the first renewal after the flood started: how long the Lease waited.
        first_after = next((renew for seen, renew, _ in watch.changes if seen > start), None)
        before = [renew for seen, renew, _ in watch.changes if seen <= start]
        return {"requests": n, "parallel": parallel, "per_client_limit": per_client_limit,
                "codes": {str(k): v for k, v in sorted(codes.items())},
                "flood_seconds": round(flood_s, 1),
                "max_renewal_gap_s": round(max(gaps), 2) if gaps else None,
                "first_renewal_after_flood_start_s": (
                    round(first_after - before[-1], 2) if first_after and before else None),
                "holders": sorted({h for _s, _r, h in watch.changes}),
                "renewals_during": len(during)}
    finally:
        watch.stop()
        srv.stop()


# --------------------------------------------------------------------------------- item 6


def _lifetime(srv: Server, send: list[bytes], every: float, cap: float,
              tls: bool = True) -> dict[str, Any]:
    raw = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    sock: socket.socket = srv.ctx.wrap_socket(raw, server_hostname="127.0.0.1") if tls else raw
    from tests.pykueue_server import trickle_until_closed

    def chunks() -> Iterator[bytes]:
        yield from send
        while send:
            yield send[-1]

    try:
        lived, got = trickle_until_closed(sock, chunks(), every, cap)
    finally:
        sock.close()
    return {"lived_s": round(lived, 1), "closed_by_server": lived < cap,
            "answer": got.split(b"\r\n", 1)[0].decode(errors="replace") or None}


def attack_slow(source: Path, cap: float) -> dict[str, Any]:
    srv = Server("slow", source, {})
    body_head = (b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nContent-Length: 1000\r\n\r\n")
    cases = {
        "idle_after_handshake": ([], 2.0, True),
        "headers_one_line_per_2s": ([b"GET /healthz HTTP/1.1\r\n", b"X-Slow: 1\r\n"], 2.0, True),
        "body_one_byte_per_2s": ([body_head, b" "], 2.0, True),
        "no_tls_handshake": ([], 2.0, False),
    }
    try:
        with cf.ThreadPoolExecutor(len(cases)) as pool:
            futures = {name: pool.submit(_lifetime, srv, send, every, cap, tls)
                       for name, (send, every, tls) in cases.items()}
            return {name: f.result() for name, f in futures.items()} | {"cap_s": cap}
    finally:
        srv.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="flood,tokens,slow",
                        help="comma-separated: flood, tokens, slow")
    parser.add_argument("--source", type=Path, default=ROOT,
                        help="directory whose app package is served (default: this checkout)")
    parser.add_argument("--cap", type=float, default=100.0,
                        help="longest a slow connection is watched (seconds)")
    parser.add_argument("--tokens", type=int, default=3000, help="requests in the token flood")
    parser.add_argument("--parallel", type=int, default=100,
                        help="token flood requests in flight at once")
    parser.add_argument("--variants", default="limited,unlimited",
                        help="token flood with the per-client limit (limited), without, or both")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(","))
    out: dict[str, Any] = {"source": str(args.source)}
    if "flood" in only:
        out["flood_item2"] = attack_flood(args.source)
    if "tokens" in only:
        out["tokens_item3"] = [
            attack_tokens(args.source, variant == "limited", args.tokens, args.parallel)
            for variant in args.variants.split(",")]
    if "slow" in only:
        out["slow_item6"] = attack_slow(args.source, args.cap)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
