"""The simulator's input: a YAML trace of queues, flavors and workload arrivals.

Shape (camelCase fields as in Kueue v1beta2 objects; durations are seconds as numbers or
strings ``"200ms"``, ``"1.5s"``, ``"2m"``, ``"1h"``; amounts are Kubernetes quantities)::

    name: baseline                  # optional, shown in reports
    evictionDelay: 0s               # preemption decision -> victim's quota released (default 0)
    flavors:                        # ResourceFlavors
      - name: default
        nodeLabels: {pool: a}       # optional; also nodeTaints, tolerations
    namespaces:                     # optional labels, for namespaceSelector
      - {name: research, labels: {team: research}}
    cohorts:                        # ClusterQueues grouped by cohort
      - name: cohort                # with count N: cohort-0 .. cohort-<N-1>
        count: 5
        clusterQueues: [<clusterQueue>, ...]   # optional
        parentName: org             # optional: a Kueue v1beta2 Cohort object (see below)
        resourceGroups: [...]       # optional: the cohort's own quota (Kueue's form)
        fairSharing: {weight: 2}    # optional, default 1
    clusterQueues: [<clusterQueue>, ...]   # outside `cohorts` (may name `cohort:`)
    localQueues:                    # extra LocalQueues (every ClusterQueue has its own)
      - {namespace: ml, name: train, clusterQueue: research}
    workloads: [<workloadClass>, ...]      # with `localQueue: namespace/name`
    arrivals:                       # explicit arrivals
      - {at: 1s, name: big, localQueue: ml/train, request: {nvidia.com/gpu: 4},
         runtime: 10m, priority: 0, pods: 1, class: adhoc}

    <clusterQueue>: name, count (replicas), namespace (of its own LocalQueue, default
      "default"; the LocalQueue is named like the ClusterQueue), queueingStrategy,
      namespaceSelector ({} = all namespaces; unset = none, as Kueue), preemption,
      flavorFungibility, stopPolicy, resourceGroups (Kueue's form), fairSharing {weight}, workloads:
      [<workloadClass>, ...] submitted to its own LocalQueue.

A `cohorts` entry with ``parentName``, ``resourceGroups`` or ``fairSharing`` is a Cohort
object (``Trace.cohorts``); one with only a name and ClusterQueues is an implicit cohort.
    <workloadClass>: class (name), count, interval, start, request {resource: per-pod
      amount}, pods (default 1), runtime, priority (default 0).

Replicated names: a ClusterQueue named ``cq`` gets ``-<cohort index>`` when its cohort
has ``count`` > 1 and ``-<replica index>`` when it has ``count`` > 1 (``cq-0-0`` ..); use
``{c}`` / ``{q}`` in the name to place the indexes yourself.

Every error is a ``TraceError`` whose message starts ``<file>:<line>:`` (line of the
offending YAML node, from yaml's node marks) and names the field path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml
from yaml.constructor import ConstructorError, SafeConstructor

from app.core.quantity import US, QuantityError, parse_duration_us, parse_quantity
from app.core.spec import (
    ClusterQueueSpec,
    CohortSpec,
    ConfigProblem,
    LocalQueue,
    ResourceFlavor,
    validate_cluster_queue,
    validate_cohort,
)
from app.core.types import ClusterQueueName, CohortName, FlavorName, ResourceName
from app.core.workload import PodSet, Workload
from app.wire import queues as wire
from app.wire.fields import WorkloadSpecError

__all__ = [
    "Arrival",
    "Submission",
    "Trace",
    "TraceError",
    "WorkloadClass",
    "load_trace",
    "parse_duration_us",
    "parse_trace",
    "with_nominal",
]

E = TypeVar("E", bound=StrEnum)


class TraceError(ValueError):
    """A trace is malformed. ``line`` is 1-based; the message reads ``file:line: what``."""

    def __init__(self, source: str, line: int, message: str) -> None:
        self.source, self.line, self.why = source, line, message
        super().__init__(f"{source}:{line}: {message}")


@dataclass(frozen=True, slots=True)
class WorkloadClass:
    """``count`` Workloads submitted to LocalQueue ``local_queue`` (``namespace/name``), one
    every ``interval_us`` from ``start_us``; each runs ``runtime_us`` once admitted.
    ``requests``: per pod (milli-CPU, bytes, counts); ``line``: where it is defined."""

    name: str
    local_queue: str
    count: int
    interval_us: int
    start_us: int
    pods: int
    requests: Mapping[ResourceName, int]
    runtime_us: int
    priority: int
    line: int
    prefix: str = ""


@dataclass(frozen=True, slots=True)
class Arrival:
    """One explicit arrival at ``at_us`` (see ``WorkloadClass`` for the other fields)."""

    at_us: int
    name: str
    class_name: str
    local_queue: str
    pods: int
    requests: Mapping[ResourceName, int]
    runtime_us: int
    priority: int
    line: int


@dataclass(frozen=True, slots=True)
class Submission:
    """A Workload as the simulator creates it: at ``at_us``, of class ``class_name``,
    running ``runtime_us`` from its admission."""

    at_us: int
    class_name: str
    workload: Workload
    runtime_us: int


@dataclass
class Trace:
    """A parsed trace. ``cq_class``: ClusterQueue -> the name of the template it came from
    (Kueue's perf test "className"), for per-class usage."""

    source: str
    name: str
    eviction_delay_us: int
    flavors: list[ResourceFlavor] = field(default_factory=list)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    cluster_queues: list[ClusterQueueSpec] = field(default_factory=list)
    cohorts: list[CohortSpec] = field(default_factory=list)
    cq_class: dict[ClusterQueueName, str] = field(default_factory=dict)
    local_queues: list[LocalQueue] = field(default_factory=list)
    classes: list[WorkloadClass] = field(default_factory=list)
    arrivals: list[Arrival] = field(default_factory=list)

    def workload_count(self) -> int:
        """How many Workloads the trace submits."""
        return sum(c.count for c in self.classes) + len(self.arrivals)

    def submissions(self) -> list[Submission]:
        """Every Workload in arrival order (time, then definition order); raises
        ``TraceError`` when two entries would create the same Workload. Names are
        ``<prefix><class>-<n>`` (prefix: the ClusterQueue's name and "-" for classes under
        a ClusterQueue); uids are the arrival sequence number, zero-padded, so equal
        creation times keep definition order."""
        raw: list[tuple[int, int, int, str, str, str, int, Mapping[ResourceName, int], int, int]]
        raw = []
        seen: dict[str, int] = {}

        def once(lq: str, name: str, line: int) -> None:
            key = f"{lq.split('/', 1)[0]}/{name}"
            if key in seen:
                raise TraceError(self.source, line, f"Workload {key} would be created twice "
                                 f"(also by the entry at line {seen[key]})")
            seen[key] = line

        for ci, c in enumerate(self.classes):
            for n in range(c.count):
                once(c.local_queue, f"{c.prefix}{c.name}-{n}", c.line)
                raw.append((c.start_us + n * c.interval_us, 0, ci * 1_000_000_000 + n,
                            f"{c.prefix}{c.name}-{n}", c.name, c.local_queue, c.pods,
                            c.requests, c.runtime_us, c.priority))
        for ai, a in enumerate(self.arrivals):
            once(a.local_queue, a.name, a.line)
            raw.append((a.at_us, 1, ai, a.name, a.class_name, a.local_queue, a.pods,
                        a.requests, a.runtime_us, a.priority))
        raw.sort(key=lambda r: r[:3])
        out = []
        for seq, (at, _, _, name, cls, lq, pods, req, runtime, prio) in enumerate(raw):
            ns, lq_name = lq.split("/", 1)
            wl = Workload(ns, name, lq_name, (PodSet("main", pods, req),), priority=prio,
                          creation=at / US, uid=f"{seq:09d}")
            out.append(Submission(at, cls, wl, runtime))
        return out


# ---- YAML nodes with marks --------------------------------------------------------------------

_constructor = SafeConstructor()


class _N:
    """A YAML node with its file and field path; typed accessors raise ``TraceError``."""

    __slots__ = ("node", "src", "path")

    def __init__(self, node: yaml.Node, src: str, path: str) -> None:
        self.node, self.src, self.path = node, src, path

    @property
    def line(self) -> int:
        return self.node.start_mark.line + 1

    def fail(self, why: str) -> NoReturn:
        where = f"{self.path}: " if self.path else ""
        raise TraceError(self.src, self.line, where + why)

    def value(self) -> Any:
        try:
            return _constructor.construct_object(self.node, deep=True)
        except ConstructorError as exc:  # pragma: no cover - safe tags only
            self.fail(str(exc.problem))

    def map(self, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, _N]:
        if not isinstance(self.node, yaml.MappingNode):
            self.fail(f"expected a mapping, got {_kind(self.node)}")
        out: dict[str, _N] = {}
        for k, v in self.node.value:
            kn = _N(k, self.src, self.path)
            key = kn.value()
            if not isinstance(key, str):
                kn.fail(f"field names are strings, got {key!r}")
            here = f"{self.path}.{key}" if self.path else key
            if key not in allowed:
                _N(k, self.src, here).fail(f"unknown field (expected one of {', '.join(allowed)})")
            if key in out:
                _N(k, self.src, here).fail("duplicate field")
            out[key] = _N(v, self.src, here)
        for r in required:
            if r not in out:
                self.fail(f"missing required field {r!r}")
        return out

    def seq(self) -> list[_N]:
        if not isinstance(self.node, yaml.SequenceNode):
            self.fail(f"expected a list, got {_kind(self.node)}")
        return [_N(v, self.src, f"{self.path}[{i}]") for i, v in enumerate(self.node.value)]

    def str(self) -> str:
        v = self.value() if isinstance(self.node, yaml.ScalarNode) else None
        if not isinstance(v, str) or not v:
            self.fail(f"expected a non-empty string, got {_shown(self)}")
        return v

    def int(self, minimum: int | None = None) -> int:
        v = self.value() if isinstance(self.node, yaml.ScalarNode) else None
        if isinstance(v, bool) or not isinstance(v, int):
            self.fail(f"expected an integer, got {_shown(self)}")
        if minimum is not None and v < minimum:
            self.fail(f"must be >= {minimum}, got {v}")
        return v

    def duration_us(self) -> int:
        v = self.value() if isinstance(self.node, yaml.ScalarNode) else None
        try:
            return parse_duration_us(v)
        except ValueError as exc:
            self.fail(str(exc))

    def quantity(self, resource: str) -> int:
        v = self.value() if isinstance(self.node, yaml.ScalarNode) else None
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            self.fail(f"expected a quantity, got {_shown(self)}")
        try:
            return parse_quantity(v, resource, field=self.path)
        except QuantityError as exc:
            self.fail(f"invalid quantity {v!r}: {exc.why}")

    def labels(self) -> dict[str, str]:
        if not isinstance(self.node, yaml.MappingNode):
            self.fail(f"expected a mapping of strings, got {_kind(self.node)}")
        out = {}
        for k, v in self.node.value:
            key, val = _N(k, self.src, self.path).str(), _N(v, self.src, self.path)
            raw = val.value() if isinstance(v, yaml.ScalarNode) else None
            if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
                val.fail(f"label {key!r}: expected a string, got {_shown(val)}")
            out[key] = str(raw)
        return out

    def plain(self, shape: Any) -> Any:
        """The node as plain JSON values, every mapping key checked against ``shape``: a dict
        (allowed keys -> their shapes), a one-element list (a list of that shape), ``ANY``
        (a mapping of strings, e.g. labels) or ``None`` (a scalar)."""
        if isinstance(shape, dict):
            m = self.map(tuple(shape))
            return {k: v.plain(shape[k]) for k, v in m.items()}
        if isinstance(shape, list):
            return [x.plain(shape[0]) for x in self.seq()]
        if shape is ANY:
            return self.labels()
        if not isinstance(self.node, yaml.ScalarNode):
            self.fail(f"expected a value, got {_kind(self.node)}")
        return self.value()

    def at(self, path: str) -> _N:
        """The deepest node on a wire field path (``spec.resourceGroups[0].flavors[1].name``,
        the ``spec.`` prefix dropped), for the line of a reader's error."""
        here = self
        for part in re.findall(r"[^.\[\]]+|\[\d+\]", path.removeprefix("spec.")):
            node = here.node
            if part.startswith("[") and isinstance(node, yaml.SequenceNode):
                i = int(part[1:-1])
                if i >= len(node.value):
                    break
                here = _N(node.value[i], here.src, f"{here.path}{part}")
            elif isinstance(node, yaml.MappingNode):
                hit = [v for k, v in node.value if getattr(k, "value", None) == part]
                if not hit:
                    break
                here = _N(hit[0], here.src, f"{here.path}.{part}" if here.path else part)
            else:
                break
        return here

    def enum(self, kind: type[E]) -> E:
        v = self.str()
        try:
            return kind(v)
        except ValueError:
            self.fail(f"unsupported value {v!r} (one of {', '.join(e.value for e in kind)})")


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return repr(node.value)


def _shown(n: _N) -> str:
    return repr(n.value()) if isinstance(n.node, yaml.ScalarNode) else _kind(n.node)


# ---- the parser -------------------------------------------------------------------------------

_TOP = ("name", "evictionDelay", "flavors", "namespaces", "cohorts", "clusterQueues",
        "localQueues", "workloads", "arrivals")
_CQ = ("name", "count", "cohort", "namespace", "queueingStrategy", "namespaceSelector",
       "preemption", "flavorFungibility", "stopPolicy", "resourceGroups", "fairSharing",
       "workloads")
_COHORT = ("name", "count", "clusterQueues", "parentName", "resourceGroups", "fairSharing")
_CLASS = ("class", "count", "interval", "start", "request", "pods", "runtime", "priority",
          "localQueue")
_ARRIVAL = ("at", "name", "class", "localQueue", "request", "pods", "runtime", "priority")
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
ANY = object()  # plain(): a mapping of string values
# Kueue v1beta2 shapes of the queue objects' fields a trace may write (plain() checks keys).
_TOLERATION = {"key": None, "operator": None, "value": None, "effect": None}
_FLAVOR = {"name": None, "nodeLabels": ANY, "nodeTaints": [{"key": None, "value": None,
                                                           "effect": None}],
           "tolerations": [_TOLERATION]}
_GROUPS = [{"coveredResources": [None], "flavors": [{"name": None, "resources": [
    {"name": None, "nominalQuota": None, "borrowingLimit": None, "lendingLimit": None}]}]}]
_SPEC = {
    "queueingStrategy": None, "stopPolicy": None, "resourceGroups": _GROUPS,
    "namespaceSelector": {"matchLabels": ANY, "matchExpressions": [
        {"key": None, "operator": None, "values": [None]}]},
    "preemption": {"withinClusterQueue": None, "reclaimWithinCohort": None,
                   "borrowWithinCohort": {"policy": None, "maxPriorityThreshold": None}},
    "flavorFungibility": {"whenCanBorrow": None, "whenCanPreempt": None, "preference": None},
    "fairSharing": {"weight": None}, "parentName": None,
}


class _Parser:
    def __init__(self, src: str) -> None:
        self.src = src
        self.flavors: dict[FlavorName, ResourceFlavor] = {}
        self.cq_lines: dict[str, _N] = {}
        self.lq_lines: dict[str, _N] = {}
        self.names: dict[str, _N] = {}

    def name(self, n: _N, what: str) -> str:
        v = n.str()
        if not _NAME.fullmatch(v) or len(v) > 253:
            n.fail(f"{what} name {v!r} must be lower case letters, digits, '-' or '.'")
        return v

    def parse(self, root: _N) -> Trace:
        top = root.map(_TOP)
        t = Trace(self.src, top["name"].str() if "name" in top else Path(self.src).stem,
                  top["evictionDelay"].duration_us() if "evictionDelay" in top else 0)
        for fn in top["flavors"].seq() if "flavors" in top else []:
            t.flavors.append(self.flavor(fn))
        for nn in top["namespaces"].seq() if "namespaces" in top else []:
            m = nn.map(("name", "labels"), ("name",))
            t.namespaces[self.name(m["name"], "namespace")] = (
                m["labels"].labels() if "labels" in m else {})
        for cn in top["cohorts"].seq() if "cohorts" in top else []:
            m = cn.map(_COHORT, ("name",))
            count = m["count"].int(1) if "count" in m else 1
            base = m["name"].str()
            explicit = any(k in m for k in ("parentName", "resourceGroups", "fairSharing"))
            for c in range(count):
                cohort = self.replica_name(m["name"], base, {"c": c}, count > 1, "c")
                if explicit:
                    t.cohorts.append(self.cohort(m, cohort, cn))
                for qn in m["clusterQueues"].seq() if "clusterQueues" in m else []:
                    self.cluster_queue(t, qn, CohortName(cohort), c, count > 1)
        for qn in top["clusterQueues"].seq() if "clusterQueues" in top else []:
            self.cluster_queue(t, qn, None, 0, False)
        for ln in top["localQueues"].seq() if "localQueues" in top else []:
            m = ln.map(("namespace", "name", "clusterQueue"), ("name", "clusterQueue"))
            ns = self.name(m["namespace"], "namespace") if "namespace" in m else "default"
            cq = m["clusterQueue"].str()
            if cq not in self.cq_lines:
                m["clusterQueue"].fail(f"ClusterQueue {cq!r} is not defined in this trace")
            lq = LocalQueue(ns, self.name(m["name"], "LocalQueue"), ClusterQueueName(cq))
            self.add_local_queue(t, lq, ln)
        for wn in top["workloads"].seq() if "workloads" in top else []:
            t.classes.append(self.workload_class(wn, None, ""))
        for i, an in enumerate(top["arrivals"].seq() if "arrivals" in top else []):
            t.arrivals.append(self.arrival(an, i))
        for ns in {lq.namespace for lq in t.local_queues}:
            t.namespaces.setdefault(ns, {})
        return t

    # ---- names and replicas ---------------------------------------------------------------
    def replica_name(self, n: _N, base: str, idx: dict[str, int], suffix: bool, key: str) -> str:
        if "{" in base:
            try:
                return base.format(**idx)
            except (KeyError, IndexError, ValueError) as exc:
                n.fail(f"bad placeholder in {base!r} (use {{c}} for the cohort index, "
                       f"{{q}} for the ClusterQueue replica): {exc}")
        return f"{base}-{idx[key]}" if suffix else base

    def unique(self, n: _N, kind: str, value: str) -> None:
        key = f"{kind}/{value}"
        if key in self.names:
            n.fail(f"{kind} {value!r} is defined twice (first at line {self.names[key].line})")
        self.names[key] = n

    # ---- ResourceFlavor -------------------------------------------------------------------
    def flavor(self, n: _N) -> ResourceFlavor:
        m = n.map(tuple(_FLAVOR), ("name",))
        name = self.name(m["name"], "ResourceFlavor")
        self.unique(m["name"], "ResourceFlavor", name)
        spec = {k: v.plain(_FLAVOR[k]) for k, v in m.items() if k != "name"}
        try:
            flavor = wire.resource_flavor({"metadata": {"name": name}, "spec": spec})
        except WorkloadSpecError as exc:
            n.at(exc.field).fail(str(exc).removeprefix(f"{exc.field}: "))
        self.flavors[flavor.name] = flavor
        return flavor

    def read(self, n: _N, reader: Any, obj: dict[str, Any], what: str) -> Any:
        """``reader(obj)`` (an ``app.wire.queues`` reader); its problem fails the trace at
        the line of the field it names."""
        spec, problem = reader(obj)
        if problem is not None:
            n.at(problem.field).fail(f"{_why(problem)} ({what})")
        return spec

    def spec(self, m: dict[str, _N], keys: tuple[str, ...]) -> dict[str, Any]:
        return {k: m[k].plain(_SPEC[k]) for k in keys if k in m}

    # ---- Cohort ---------------------------------------------------------------------------
    def cohort(self, m: dict[str, _N], name: str, n: _N) -> CohortSpec:
        self.name(_Named(m["name"], name), "cohort")
        self.unique(m["name"], "Cohort", name)
        if "parentName" in m:
            self.name(m["parentName"], "cohort")
        self.check_flavors(m)
        obj = {"metadata": {"name": name},
               "spec": self.spec(m, ("parentName", "resourceGroups", "fairSharing"))}
        spec = self.read(n, wire.cohort, obj, f"Cohort {name}")
        problem = validate_cohort(spec)
        if problem is not None:
            n.at(problem.field).fail(f"{_why(problem)} (Cohort {name})")
        return spec

    def check_flavors(self, m: dict[str, _N]) -> None:
        """Every flavor a ``resourceGroups`` names is defined under ``flavors``."""
        for g in m["resourceGroups"].seq() if "resourceGroups" in m else []:
            gm = g.map(tuple(_GROUPS[0]), tuple(_GROUPS[0]))
            for fn in gm["flavors"].seq():
                fm = fn.map(("name", "resources"), ("name", "resources"))
                if fm["name"].str() not in self.flavors:
                    fm["name"].fail(f"ResourceFlavor {fm['name'].str()!r} is not defined "
                                    "under `flavors`")
                for rn in fm["resources"].seq():
                    rn.map(tuple(_GROUPS[0]["flavors"][0]["resources"][0]),
                           ("name", "nominalQuota"))

    # ---- ClusterQueue ---------------------------------------------------------------------
    def cluster_queue(self, t: Trace, n: _N, cohort: CohortName | None, c: int,
                      cohort_replicated: bool) -> None:
        m = n.map(_CQ, ("name", "resourceGroups"))
        if cohort is not None and "cohort" in m:
            m["cohort"].fail("a ClusterQueue under `cohorts` takes its cohort from there")
        if "cohort" in m:
            cohort = CohortName(self.name(m["cohort"], "cohort"))
        count = m["count"].int(1) if "count" in m else 1
        base = m["name"].str()
        ns = self.name(m["namespace"], "namespace") if "namespace" in m else "default"
        self.check_flavors(m)
        spec_obj = self.spec(m, ("queueingStrategy", "stopPolicy", "resourceGroups",
                                 "namespaceSelector", "preemption", "flavorFungibility",
                                 "fairSharing"))
        if cohort is not None:
            spec_obj["cohortName"] = str(cohort)
        for q in range(count):
            if "{" in base:
                name = self.replica_name(m["name"], base, {"c": c, "q": q}, False, "q")
            else:
                name = base + (f"-{c}" if cohort_replicated else "") + (
                    f"-{q}" if count > 1 else "")
            self.name(_Named(m["name"], name), "ClusterQueue")
            self.unique(m["name"], "ClusterQueue", name)
            spec = self.read(n, wire.cluster_queue,
                             {"metadata": {"name": name}, "spec": spec_obj},
                             f"ClusterQueue {name}")
            problem = validate_cluster_queue(spec, self.flavors)
            if problem is not None and problem.reason != "Stopped":
                n.at(problem.field).fail(f"{_why(problem)} (ClusterQueue {name})")
            t.cluster_queues.append(spec)
            t.cq_class[spec.name] = base.split("{")[0].rstrip("-") or base
            self.cq_lines[name] = n
            lq = LocalQueue(ns, name, spec.name)
            self.add_local_queue(t, lq, m["name"])
            for wn in m["workloads"].seq() if "workloads" in m else []:
                t.classes.append(self.workload_class(wn, lq.key, f"{name}-"))

    def add_local_queue(self, t: Trace, lq: LocalQueue, n: _N) -> None:
        self.unique(n, "LocalQueue", lq.key)
        self.lq_lines[lq.key] = n
        t.local_queues.append(lq)

    # ---- workloads ------------------------------------------------------------------------
    def requests(self, n: _N) -> dict[ResourceName, int]:
        if not isinstance(n.node, yaml.MappingNode) or not n.node.value:
            n.fail("expected a non-empty mapping {resource: per-pod amount}")
        out = {}
        for k, v in n.node.value:
            r = _N(k, n.src, n.path).str()
            out[ResourceName(r)] = _N(v, n.src, f"{n.path}.{r}").quantity(r)
        return out

    def local_queue_ref(self, n: _N) -> str:
        ref = n.str()
        if "/" not in ref:
            ref = f"default/{ref}"
        if ref not in self.lq_lines:
            n.fail(f"LocalQueue {ref!r} is not defined (namespace/name of a ClusterQueue's "
                   f"own LocalQueue or of one under `localQueues`)")
        return ref

    def workload_class(self, n: _N, lq: str | None, prefix: str) -> WorkloadClass:
        required = ("class", "count", "request", "runtime") + (() if lq else ("localQueue",))
        m = n.map(_CLASS, required)
        if lq is not None and "localQueue" in m:
            m["localQueue"].fail("workloads under a ClusterQueue go to its own LocalQueue")
        count = m["count"].int(0)
        interval = m["interval"].duration_us() if "interval" in m else 0
        return WorkloadClass(
            name=self.name(m["class"], "class"),
            local_queue=lq if lq is not None else self.local_queue_ref(m["localQueue"]),
            count=count, interval_us=interval,
            start_us=m["start"].duration_us() if "start" in m else 0,
            pods=m["pods"].int(1) if "pods" in m else 1,
            requests=self.requests(m["request"]),
            runtime_us=m["runtime"].duration_us(),
            priority=m["priority"].int() if "priority" in m else 0,
            line=n.line, prefix=prefix,
        )

    def arrival(self, n: _N, i: int) -> Arrival:
        m = n.map(_ARRIVAL, ("at", "localQueue", "request", "runtime"))
        name = self.name(m["name"], "Workload") if "name" in m else f"arrival-{i}"
        ref = self.local_queue_ref(m["localQueue"])
        return Arrival(
            at_us=m["at"].duration_us(), name=name,
            class_name=self.name(m["class"], "class") if "class" in m else "arrivals",
            local_queue=ref, pods=m["pods"].int(1) if "pods" in m else 1,
            requests=self.requests(m["request"]), runtime_us=m["runtime"].duration_us(),
            priority=m["priority"].int() if "priority" in m else 0, line=n.line,
        )


def _why(problem: ConfigProblem) -> str:
    """A reader's problem message without the prefix and the field path the trace error
    already shows."""
    why = problem.message.removeprefix("Can't admit new workloads: ")
    return why.removeprefix(f"{problem.field}: ")


class _Named(_N):
    """A generated name reported at the line of the template it came from."""

    def __init__(self, at: _N, value: str) -> None:
        super().__init__(at.node, at.src, at.path)
        self._v = value

    def str(self) -> str:
        return self._v


def parse_trace(text: str, source: str = "<trace>") -> Trace:
    """Parse a YAML trace (see the module docstring). Raises ``TraceError`` naming the line."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise TraceError(source, line, f"invalid YAML: {exc.problem or exc}") from exc
    if root is None:
        raise TraceError(source, 1, "empty trace")
    return _Parser(source).parse(_N(root, source, ""))


def load_trace(path: str | Path) -> Trace:
    """Read and parse a trace file. Raises ``TraceError`` (and ``OSError`` if unreadable)."""
    p = Path(path)
    return parse_trace(p.read_text(encoding="utf-8"), str(path))



def with_nominal(trace: Trace, setting: str) -> Trace:
    """Trace with one nominalQuota changed: ``setting`` is
    ``<ClusterQueue>:<flavor>:<resource>=<quantity>`` (``research:a100:nvidia.com/gpu=6``),
    the "what if" of ``pykueue simulate --nominal``. Raises ``ValueError`` naming what is
    wrong (unknown ClusterQueue, flavor or resource; bad quantity; invalid result)."""
    target, sep, qty = setting.partition("=")
    parts = target.split(":")
    if not sep or len(parts) != 3 or not all(parts):
        raise ValueError(f"--nominal {setting!r}: expected CLUSTERQUEUE:FLAVOR:RESOURCE=QUANTITY")
    cq_name, flavor, resource = parts
    try:
        amount = parse_quantity(qty, resource, field="--nominal")
    except QuantityError as exc:
        raise ValueError(f"--nominal {setting!r}: {exc.why}") from exc
    names = sorted(str(spec.name) for spec in trace.cluster_queues)
    if cq_name not in names:
        raise ValueError(f"--nominal {setting!r}: no ClusterQueue {cq_name} in the trace "
                         f"(it has {', '.join(names[:10])}{', ...' if len(names) > 10 else ''})")
    out, found = [], False
    for spec in trace.cluster_queues:
        if spec.name == cq_name:
            groups = []
            for g in spec.resource_groups:
                flavors = []
                for f in g.flavors:
                    rqs = []
                    for rq in f.resources:
                        if f.name == flavor and rq.name == resource:
                            rq, found = replace(rq, nominal=amount), True
                        rqs.append(rq)
                    flavors.append(replace(f, resources=tuple(rqs)))
                groups.append(replace(g, flavors=tuple(flavors)))
            spec = replace(spec, resource_groups=tuple(groups))
            problem = validate_cluster_queue(spec, {f.name: f for f in trace.flavors})
            if problem is not None and problem.reason != "Stopped":
                raise ValueError(f"--nominal {setting!r}: {problem.message}")
        out.append(spec)
    if not found:
        raise ValueError(f"--nominal {setting!r}: ClusterQueue {cq_name} has no quota for "
                         f"{resource} in flavor {flavor}")
    return replace(trace, cluster_queues=out)
