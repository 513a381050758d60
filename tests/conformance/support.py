"""API-only helpers for the conformance suite: objects, conditions, and the owner's part.

Workloads here have no Job: the suite plays their owner, as Kueue's performance runner does.
Kueue releases an evicted Workload's quota only when its owner clears the admission
(``finish_eviction``: QuotaReserved=False reason Pending, no ``status.admission``); a Workload
that ran is finished by its owner with a Finished condition (``finish``).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tests.labfixture import LabHandle, wait_for

GROUP = "kueue.x-k8s.io/v1beta2"

# QuotaReserved=False reasons: Kueue v0.17.1's (scheduler.go: "Pending" for any Workload that
# does not fit; workload_controller.go: "Inadmissible" for a missing or inactive queue), which
# pykueue writes too (docs/architecture.md, "Differences from Kueue v0.17.1").
PENDING_REASONS = {
    "no-fit": {"kueue": "Pending", "pykueue": "Pending"},
    "cq-stopped": {"kueue": "Inadmissible", "pykueue": "Inadmissible"},
    "cq-missing": {"kueue": "Inadmissible", "pykueue": "Inadmissible"},
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
    """The system under test (``name``: pykueue or kueue) behind the lab's API server."""

    name: str
    lab: LabHandle

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

    def flavor(self, name: str, node_labels: dict[str, str] | None = None) -> str:
        spec = {"nodeLabels": node_labels} if node_labels else {}
        self.lab.apply(json.dumps({"apiVersion": GROUP, "kind": "ResourceFlavor",
                                   "metadata": {"name": self.n(name)}, "spec": spec}))
        return self.n(name)

    def cluster_queue(self, name: str, flavors: list[tuple[str, dict[str, dict[str, str]]]], *,
                      cohort: str | None = None, strategy: str = "BestEffortFIFO",
                      within: str = "Never", reclaim: str = "Never",
                      stop_policy: str | None = None, wait_active: bool = True) -> str:
        """A ClusterQueue with one resource group: ``flavors`` = [(flavor, {resource:
        {nominalQuota, borrowingLimit?, lendingLimit?}})], and a LocalQueue ``lq-<name>`` in
        the scope's namespace."""
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
                 count: int = 1) -> str:
        """A Workload (no owner) in LocalQueue ``lq-<cq>``: one PodSet ``main``."""
        self.lab.kubectl("create", "-f", "-", input=json.dumps({
            "apiVersion": GROUP, "kind": "Workload",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"queueName": f"lq-{cq}", "priority": priority, "podSets": [{
                "name": "main", "count": count, "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                                    "resources": {"requests": requests}}]}}}]}}))
        return name

    # -- reading

    def wl(self, name: str) -> dict:
        return self.target.get_wl(self.ns, name)

    def cq(self, name: str) -> dict:
        return self.lab.get("clusterqueue.kueue.x-k8s.io", self.n(name))

    def admitted(self, name: str, timeout: float = 30) -> dict:
        """Wait until ``name`` holds quota and is admitted; returns it."""
        def ok() -> dict | None:
            w = self.wl(name)
            adm = (w.get("status") or {}).get("admission")
            return w if adm and is_true(w, "QuotaReserved") and is_true(w, "Admitted") \
                and not is_true(w, "Evicted") else None
        return wait_for(ok, timeout, f"{self.ns}/{name} admitted")

    def pending(self, name: str, timeout: float = 30) -> dict:
        """Wait until ``name`` holds no quota: no ``status.admission`` and QuotaReserved not
        True (a Workload never evaluated, e.g. behind a StrictFIFO head, has no condition)."""
        def ok() -> dict | None:
            w = self.wl(name)
            return w if not is_true(w, "QuotaReserved") and \
                not (w.get("status") or {}).get("admission") else None
        return wait_for(ok, timeout, f"{self.ns}/{name} pending")

    def stays_pending(self, name: str, seconds: float = 2.0) -> dict:
        """``name`` is pending now and still after ``seconds`` (scheduling cycles ran)."""
        self.pending(name)
        time.sleep(seconds)
        return self.pending(name, timeout=1)

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
        Evicted=True reason Preempted, Preempted=True with one of ``reasons``."""
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
