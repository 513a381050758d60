"""API-only helpers for the conformance suite: objects, conditions, and the owner's part.

Workloads made by ``Scope.workload`` have no Job: the suite plays their owner, as Kueue's
performance runner does (Jobs, ``create_job``, are owned by the target's Job controller).
Kueue releases an evicted Workload's quota only when its owner clears the admission
(``finish_eviction``: QuotaReserved=False reason Pending, no ``status.admission``); a Workload
that ran is finished by its owner with a Finished condition (``finish``).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.labfixture import LabHandle, wait_for

GROUP = "kueue.x-k8s.io/v1beta2"

# QuotaReserved=False reasons: Kueue v0.17.1's (scheduler.go: "Pending" for any Workload that
# does not fit; workload_controller.go: "Inadmissible" for a missing or inactive queue), which
# pykueue writes too (docs/architecture.md, "Differences from Kueue v0.17.1").
PENDING_REASONS = {
    "no-fit": {"kueue": "Pending", "pykueue": "Pending"},
    "ns-mismatch": {"kueue": "Pending", "pykueue": "Pending"},
    "cq-stopped": {"kueue": "Inadmissible", "pykueue": "Inadmissible"},
    "cq-missing": {"kueue": "Inadmissible", "pykueue": "Inadmissible"},
}


# The end of Kueue's preemption message per Preempted reason (Kueue v0.17.1 preemption.go:
# "Preempted to accommodate a workload (UID: ..., JobUID: ...) due to <wording>").
PREEMPTED_WORDING = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
    "InCohortFairSharing": "fair sharing within the cohort",
}


def cond(obj: dict | None, ctype: str) -> dict | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or []
                 if c.get("type") == ctype), None)


def is_true(obj: dict | None, ctype: str) -> bool:
    c = cond(obj, ctype)
    return bool(c and c.get("status") == "True")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Target:
    """The system under test (``name``: pykueue or kueue) behind the lab's API server;
    ``env``: the lab's environment for hack/lab.py and hack/kueue_lab.py (conftest)."""

    name: str
    lab: LabHandle
    env: dict[str, str] = field(default_factory=dict)

    def pending_reason(self, case: str) -> str:
        """The QuotaReserved=False reason this target gives in ``case`` (PENDING_REASONS)."""
        return PENDING_REASONS[case][self.name]

    # -- objects

    def scope(self, prefix: str) -> Scope:
        """A namespace and a name prefix of their own for one test."""
        s = Scope(self, f"{prefix}-{uuid.uuid4().hex[:5]}")
        self.lab.apply(json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": s.ns}}))
        return s

    def get_wl(self, ns: str, name: str) -> dict:
        return self.lab.get("workloads.kueue.x-k8s.io", "-n", ns, name)


@dataclass
class Scope:
    target: Target
    ns: str

    @property
    def lab(self) -> LabHandle:
        return self.target.lab

    def n(self, name: str) -> str:
        """A cluster-scoped name unique to this test."""
        return f"{self.ns}-{name}"

    def flavor(self, name: str, node_labels: dict[str, str] | None = None,
               **spec_extra: Any) -> str:
        """A ResourceFlavor ``<ns>-<name>``; ``spec_extra``: spec fields as written
        (``tolerations``, ``nodeTaints``)."""
        spec = {"nodeLabels": node_labels} if node_labels else {}
        spec.update(spec_extra)
        self.lab.apply(json.dumps({"apiVersion": GROUP, "kind": "ResourceFlavor",
                                   "metadata": {"name": self.n(name)}, "spec": spec}))
        return self.n(name)

    def cluster_queue(self, name: str, flavors: list[tuple[str, dict[str, dict[str, str]]]], *,
                      cohort: str | None = None, strategy: str = "BestEffortFIFO",
                      within: str = "Never", reclaim: str = "Never",
                      stop_policy: str | None = None, wait_active: bool = True,
                      **spec_extra: Any) -> str:
        """A ClusterQueue with one resource group: ``flavors`` = [(flavor, {resource:
        {nominalQuota, borrowingLimit?, lendingLimit?}})], and a LocalQueue ``lq-<name>`` in
        the scope's namespace. ``spec_extra`` adds spec fields as written (e.g.
        ``flavorFungibility``, ``namespaceSelector``; ``borrowWithinCohort`` goes into
        ``preemption``). Applying the same name again edits the queue."""
        covered = sorted({r for _f, rs in flavors for r in rs})
        spec: dict[str, Any] = {
            "namespaceSelector": {}, "queueingStrategy": strategy,
            "preemption": {"withinClusterQueue": within, "reclaimWithinCohort": reclaim},
            "resourceGroups": [{"coveredResources": covered, "flavors": [
                {"name": f, "resources": [{"name": r, **q} for r, q in sorted(rs.items())]}
                for f, rs in flavors]}],
        }
        if cohort:
            spec["cohortName"] = self.n(cohort)
        if stop_policy:
            spec["stopPolicy"] = stop_policy
        if "borrowWithinCohort" in spec_extra:
            spec["preemption"]["borrowWithinCohort"] = spec_extra.pop("borrowWithinCohort")
        spec.update(spec_extra)
        self.lab.apply(json.dumps({"apiVersion": GROUP, "kind": "ClusterQueue",
                                   "metadata": {"name": self.n(name)}, "spec": spec}))
        self.lab.apply(json.dumps({"apiVersion": GROUP, "kind": "LocalQueue",
                                   "metadata": {"name": f"lq-{name}", "namespace": self.ns},
                                   "spec": {"clusterQueue": self.n(name)}}))
        if wait_active:
            wait_for(lambda: is_true(self.lab.get("localqueue.kueue.x-k8s.io", "-n", self.ns,
                                                  f"lq-{name}"), "Active"),
                     30, f"LocalQueue lq-{name} active")
        return self.n(name)

    def workload(self, name: str, cq: str, requests: dict[str, str], *, priority: int = 0,
                 count: int = 1, ns: str | None = None, pod: dict[str, Any] | None = None
                 ) -> str:
        """A Workload (no owner) in LocalQueue ``lq-<cq>`` of ``ns`` (default: the scope's):
        one PodSet ``main`` of ``count`` pods, one container requesting ``requests``; ``pod``
        adds pod spec fields as written (initContainers, overhead, nodeSelector, ...)."""
        self.lab.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": GROUP, "kind": "Workload",
            "metadata": {"name": name, "namespace": ns or self.ns},
            "spec": {"queueName": f"lq-{cq}", "priority": priority, "podSets": [{
                "name": "main", "count": count, "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                                    "resources": {"requests": requests}}],
                    **(pod or {})}}}]}}))
        return name

    def namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        """Another namespace for this test, ``<scope ns>-<name>``, with ``labels``."""
        ns = f"{self.ns}-{name}"
        self.lab.apply(json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": ns, "labels": labels or {}}}))
        return ns

    def local_queue(self, ns: str, cq: str) -> None:
        """LocalQueue ``lq-<cq>`` in ``ns`` pointing at ClusterQueue ``cq`` (short name)."""
        self.lab.apply(json.dumps({"apiVersion": GROUP, "kind": "LocalQueue",
                                   "metadata": {"name": f"lq-{cq}", "namespace": ns},
                                   "spec": {"clusterQueue": self.n(cq)}}))

    # -- reading

    def wl(self, name: str, ns: str | None = None) -> dict:
        return self.target.get_wl(ns or self.ns, name)

    def cq(self, name: str) -> dict:
        return self.lab.get("clusterqueue.kueue.x-k8s.io", self.n(name))

    def admitted(self, name: str, timeout: float = 30, ns: str | None = None) -> dict:
        """Wait until ``name`` (in ``ns``, default the scope's) holds quota and is admitted;
        returns it."""
        def ok() -> dict | None:
            w = self.wl(name, ns)
            adm = (w.get("status") or {}).get("admission")
            return w if adm and is_true(w, "QuotaReserved") and is_true(w, "Admitted") \
                and not is_true(w, "Evicted") else None
        return wait_for(ok, timeout, f"{ns or self.ns}/{name} admitted")

    def pending(self, name: str, timeout: float = 30, ns: str | None = None) -> dict:
        """Wait until ``name`` holds no quota: no ``status.admission`` and QuotaReserved not
        True (a Workload never evaluated, e.g. behind a StrictFIFO head, has no condition)."""
        def ok() -> dict | None:
            w = self.wl(name, ns)
            return w if not is_true(w, "QuotaReserved") and \
                not (w.get("status") or {}).get("admission") else None
        return wait_for(ok, timeout, f"{ns or self.ns}/{name} pending")

    def stays_pending(self, name: str, seconds: float = 2.0, ns: str | None = None) -> dict:
        """``name`` is pending now and still after ``seconds`` (scheduling cycles ran)."""
        self.pending(name, ns=ns)
        time.sleep(seconds)
        return self.pending(name, timeout=1, ns=ns)

    def stays_admitted(self, *names: str, seconds: float = 2.0) -> None:
        """Each of ``names`` is admitted, never Evicted, for ``seconds`` (polled)."""
        deadline = time.monotonic() + seconds
        while True:
            for name in names:
                w = self.wl(name)
                assert is_true(w, "Admitted") and not is_true(w, "Evicted"), \
                    (name, w.get("status"))
            if time.monotonic() > deadline:
                return
            time.sleep(0.25)

    def reserved(self, cq: str, flavor: str, resource: str, total: int, borrowed: int) -> None:
        """Wait until ClusterQueue ``cq`` reports ``total`` and ``borrowed`` (integer units:
        milli-cpu, bytes) of ``resource`` in ``flavor`` in ``status.flavorsReservation``. The
        status trails the admissions (Kueue writes it asynchronously)."""
        from app.core.quantity import parse_quantity

        def now_is() -> tuple[int, int] | None:
            q = usage(self.cq(cq), flavor, resource)
            return None if q is None else (parse_quantity(q["total"], resource),
                                           parse_quantity(q.get("borrowed", "0"), resource))
        last: list[tuple[int, int] | None] = [None]

        def ok() -> bool:
            last[0] = now_is()
            return last[0] == (total, borrowed)
        try:
            wait_for(ok, 30, f"{cq} {flavor}/{resource} reserved {total}, borrowed {borrowed}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen (total, borrowed) = {last[0]}") from None

    def flavors_of(self, name: str) -> dict[str, str]:
        w = self.wl(name)
        return dict(w["status"]["admission"]["podSetAssignments"][0]["flavors"])

    # -- the owner's part

    def _patch_status(self, name: str, w: dict, status: dict) -> bool:
        body = {"metadata": {"resourceVersion": w["metadata"]["resourceVersion"]},
                "status": status}
        r = self.lab.kubectl("patch", "workloads.kueue.x-k8s.io", name, "-n", self.ns,
                             "--subresource=status", "--type=merge", "-p", json.dumps(body),
                             check=False)
        return r.returncode == 0

    def finish_eviction(self, name: str, timeout: float = 30) -> dict:
        """Wait for Evicted=True on ``name``; then, as its owner, stop it: clear the admission
        (QuotaReserved=False, reason Pending). Returns the Workload as evicted."""
        evicted = wait_for(lambda: (lambda w: w if is_true(w, "Evicted") else None)(
            self.wl(name)), timeout, f"{self.ns}/{name} evicted")

        def cleared() -> bool:
            w = self.wl(name)
            if not (w.get("status") or {}).get("admission"):
                return True
            conds = []
            for c in w["status"].get("conditions") or []:
                if c["type"] == "QuotaReserved":
                    c = {**c, "status": "False", "reason": "Pending",
                         "message": "the owner stopped the evicted workload",
                         "lastTransitionTime": now()}
                elif c["type"] == "Admitted" and c["status"] == "True":
                    c = {**c, "status": "False", "reason": "NoReservation",
                         "message": "The workload has no reservation",
                         "lastTransitionTime": now()}
                conds.append(c)
            return self._patch_status(name, w, {"admission": None, "conditions": conds})
        wait_for(cleared, timeout, f"{self.ns}/{name}: admission cleared by its owner")
        return evicted

    def preempted(self, name: str, *reasons: str) -> dict:
        """``finish_eviction`` of ``name``, checking Kueue's conditions on the way:
        Evicted=True reason Preempted, Preempted=True with one of ``reasons``.

        pykueue releases an evicted Workload that no object owns at once (it has no pods to
        wait for: docs/architecture.md, "Differences ... found by the conformance suite"), so
        a victim that fits elsewhere may already be admitted again when first read: then its
        Preempted condition is False, "Previously: <the preemption message>", and the reason
        is read from that message (Kueue's wording, preemption.go, which pykueue writes too).
        """
        def seen() -> dict | None:
            w = self.wl(name)
            pre = cond(w, "Preempted")
            if is_true(w, "Evicted") or (pre and pre["status"] == "False" and self.target.name
                                         == "pykueue" and is_true(w, "QuotaReserved")):
                return w
            return None
        first = wait_for(seen, 30, f"{self.ns}/{name} preempted")
        if not is_true(first, "Evicted"):
            msg = cond(first, "Preempted")["message"]
            assert msg.startswith("Previously: Preempted"), first["status"]
            assert any(msg.rstrip(".").split(";")[0].endswith(PREEMPTED_WORDING[r])
                       for r in reasons), (reasons, msg)
            return first
        evicted = self.finish_eviction(name)
        ev, pre = cond(evicted, "Evicted"), cond(evicted, "Preempted")
        assert ev is not None and ev["reason"] == "Preempted", evicted["status"]
        assert pre is not None and pre["status"] == "True", evicted["status"]
        assert pre["reason"] in reasons, pre
        return evicted

    def finish(self, name: str) -> None:
        """The owner reports ``name`` done: Finished=True (its quota is released)."""
        def done() -> bool:
            w = self.wl(name)
            conds = [c for c in (w.get("status") or {}).get("conditions") or []
                     if c["type"] != "Finished"]
            conds.append({"type": "Finished", "status": "True", "reason": "Succeeded",
                          "message": "finished by the conformance suite",
                          "lastTransitionTime": now()})
            return self._patch_status(name, w, {"conditions": conds})
        wait_for(done, 30, f"{self.ns}/{name} finished")


def usage(cq: dict, flavor: str, resource: str, field: str = "flavorsReservation"
          ) -> dict[str, str] | None:
    """``{total, borrowed}`` of ``resource`` in ``flavor`` from a ClusterQueue's status."""
    for f in (cq.get("status") or {}).get(field) or []:
        if f["name"] == flavor:
            for r in f["resources"]:
                if r["name"] == resource:
                    return r
    return None


QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def job_manifest(name: str, ns: str, requests: dict[str, str], *, queue: str | None = None,
                 parallelism: int = 1, completions: int | None = None,
                 suspend: bool | None = None, annotations: dict[str, str] | None = None,
                 pod: dict[str, Any] | None = None, indexed: bool = False) -> dict:
    """A batch/v1 Job of ``parallelism`` pods (one container asking ``requests``, the same
    as its limits, so extended resources are valid), labelled for LocalQueue ``queue`` when
    given; ``suspend`` omitted when None. ``pod`` adds pod spec fields as written."""
    spec: dict[str, Any] = {
        "parallelism": parallelism, "completions": completions or parallelism,
        # The lab's kwok runs a pod for this long (hack/lab/stages.yaml; default 3 s): the
        # Jobs here stay running until the test is over.
        "template": {"metadata": {"annotations": {"lab.pykueue.dev/run-duration": "1h"}},
                     "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                            "resources": {"requests": requests, "limits": requests}}],
            **(pod or {})}}}
    if suspend is not None:
        spec["suspend"] = suspend
    if indexed:
        spec["completionMode"] = "Indexed"
    meta: dict[str, Any] = {"name": name, "namespace": ns,
                            "labels": {QUEUE_LABEL: queue} if queue else {}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def create_job(s: Scope, name: str, requests: dict[str, str], **kw: Any) -> dict:
    """Create a Job in the scope's namespace (``job_manifest``); returns the object as the API
    server stored it, after the mutating webhooks."""
    r = s.lab.kubectl("create", "-o", "json", "-f", "-",
                      input=json.dumps(job_manifest(name, s.ns, requests, **kw)))
    return json.loads(r.stdout)


def get_job(s: Scope, name: str) -> dict:
    return s.lab.get("jobs.batch", "-n", s.ns, name)


def workload_of_job(s: Scope, job: str, timeout: float = 30) -> str:
    """The name of the Workload a Job owns (both systems create one, named their own way)."""
    def find() -> str | None:
        for w in s.lab.get("workloads.kueue.x-k8s.io", "-n", s.ns).get("items") or []:
            if any(o.get("kind") == "Job" and o.get("name") == job
                   for o in w["metadata"].get("ownerReferences") or []):
                return w["metadata"]["name"]
        return None
    return wait_for(find, timeout, f"{s.ns}: Workload of Job {job}")


def set_active(s: Scope, workload: str, active: bool) -> None:
    """Deactivate or reactivate a Workload (``spec.active``): Kueue evicts a deactivated one
    (Evicted reason Deactivated) and its Job controller suspends the Job."""
    s.lab.kubectl("patch", "workloads.kueue.x-k8s.io", workload, "-n", s.ns, "--type=merge",
                  "-p", json.dumps({"spec": {"active": active}}))
