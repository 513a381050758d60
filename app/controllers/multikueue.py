"""MultiKueue on the manager cluster: the AdmissionCheck controller
``kueue.x-k8s.io/multikueue`` (docs/multikueue.md; Kueue v0.17.1
``pkg/controller/admissionchecks/multikueue``), for the kinds of
``app.core.multikueue.ADAPTERS`` (batch/v1 Job, JobSet, Kubeflow jobs, MPIJob, RayJob,
RayCluster, RayService, TrainJob, AppWrapper).

Every ``multikueue.sync_period_seconds`` while this process leads:

1. MultiKueueClusters (read, as MultiKueueConfigs, from the informers' stores): the kubeconfig
   is read from the Secret the cluster names, in ``multikueue.namespace`` only (key
   ``kubeconfig``), checked (``kubeconfig_problem``), and a client built and probed (a list
   of Workloads); status ``Active`` True (reason ``Active``, "Connected") or False with
   Kueue's reason (``BadKubeConfig``, ``InsecureKubeConfig``, ``ClientConnectionFailed``,
   ...). A connected worker is probed again every ``multikueue.probe_period_seconds``, and
   a cluster whose kubeconfig is unusable has its Secret read again as often (at once when
   its spec changes, or it is deleted and created again: another uid).
2. AdmissionChecks of this controller: ``Active`` from their MultiKueueConfig and its
   clusters (``check_active``). While MultiKueue is off (its CRDs not served) this
   controller does not run and ``MultiKueueOff`` writes that condition instead (False,
   ``BadConfig``, "MultiKueue is off ..."), until it is stopped as this one starts.
3. Workloads holding quota whose check of this controller is not Rejected: the owner must be of
   a kind with an adapter (Job, JobSet, Kubeflow, Ray, TrainJob, AppWrapper) whose
   ``managedBy`` is ``kueue.x-k8s.io/multikueue`` (else the check is Rejected, as Kueue). A
   copy of the Workload (``remote_workload``, same name) is created on every active worker of
   the config (``status.nominatedClusterNames``); the worker's Kueue (pykueue or Kueue)
   reserves quota for it. The first worker whose copy is Admitted wins (``admitted_worker``;
   Kueue's ``MultiKueueWaitForWorkloadAdmitted``, on by default): the copies on the others are
   deleted, the check goes Ready ("The workload got reservation on "<worker>"") with
   ``status.clusterName`` set, and the job (``Adapter.remote``, labelled
   ``kueue.x-k8s.io/prebuilt-workload-name``) is created on the winner only, where it adopts
   the copy and starts. The manager admits its Workload and starts its job, which its own
   operator leaves alone (managedBy). The worker job's status is mirrored to the manager's;
   when the worker's Workload is Finished the manager's is Finished with the same reason and
   message. A Workload that is finished, lost its quota or was deleted has its copies deleted
   on every worker; a deleted one's job then has the running-pod counts mirrored from its
   copy cleared (``_workload_gone``; not a Finished one's), so its stop completes and it
   gets a new Workload.

A Workload whose copy was evicted on its worker (preempted, pods-ready timeout,
deactivated there) gets its check Retry at once ("Workload evicted on worker cluster: ...",
``evicted_on_worker``; Kueue's ``MultiKueueRedoAdmissionOnEvictionInWorker``, on by default),
so the manager evicts and requeues it, its copies are deleted and it is dispatched again. One
whose worker lost its copy (deleted, worker unreachable while another is connected) gets its
check Retry after ``multikueue.worker_lost_timeout_seconds`` ("Reserving remote lost"), with
the same effect (Kueue workerLostTimeout).

Dispatchers (``multikueue.dispatcher_name``): AllAtOnce (every active worker), Incremental
(``incremental_batch_size`` more workers of the config each ``incremental_round_seconds``,
Kueue's 3 and 5 min) or pykueue's soonest (every active worker, then only the one whose
pykueue expects to start the copy soonest and those that give no ETA: ``soonest_keep``, the
ETAs read by ``app.controllers.multikueue_eta``; again each ``soonest_round_seconds``).
Every ``multikueue.gc_interval_seconds`` the workers' Workloads with this origin whose
manager Workload is gone are deleted with their job (Kueue's GC). pykueue's opt-in
``multikueue.no_worker_timeout_seconds`` (per ClusterQueue) gives a Workload no worker
reserved condition ``MultiKueueNoWorker``.

Not done (docs/multikueue.md): the Pod, StatefulSet and LeaderWorkerSet adapters.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import yaml

from app.controllers.multikueue_eta import WorkerEtas
from app.core.multikueue import (
    BATCH_JOB,
    INCREMENTAL,
    KUBECONFIG_KEY,
    NO_WORKER,
    ORIGIN_LABEL,
    PREBUILT_LABEL,
    SOONEST,
    Adapter,
    Verdict,
    WorkerEta,
    adapter_for,
    admitted_worker,
    check_active,
    check_active_while_off,
    cluster_source_problem,
    condition_of,
    evicted_on_worker,
    first_with,
    gc_keeps,
    gc_orphans,
    kubeconfig_problem,
    next_nominees,
    no_worker_condition,
    parameters_problem,
    placed_copies,
    remote_workload,
    round_due,
    soonest_keep,
    worker_lost,
)
from app.kube.client import (
    ADMISSION_CHECKS,
    JOBS,
    JSON_PATCH,
    MULTIKUEUE_CLUSTERS,
    SECRETS,
    WORKLOADS,
    KubeClient,
    Resource,
)
from app.kube.context import AC, JOB, MKC, MKCFG, WL, Context
from app.kube.errors import ApiError, NotFound, Permanent
from app.kube.events import NORMAL
from app.kube.workqueue import WorkQueue, work
from app.wire.owners import controller_of_object
from app.wire.queues import is_multikueue_check
from app.wire.workload_status import is_finished, parse_time, rfc3339, set_condition

log = logging.getLogger(__name__)
Obj = dict[str, Any]
PROBE_TIMEOUT = 5.0
QUOTA_RESERVED, FINISHED, ACTIVE = "QuotaReserved", "Finished", "Active"


@dataclass
class Worker:
    """One MultiKueueCluster's connection: the client (None while unusable), the hash of
    the kubeconfig it was built from, its verdict and when it was last looked at (its
    kubeconfig read and found unusable, or a probe sent; monotonic s)."""

    client: KubeClient | None = None
    config_hash: str = ""
    verdict: Verdict = field(default_factory=lambda: Verdict(False, "Pending", ""))
    probed_at: float = -1e9
    generation: Any = None
    uid: Any = None  # the cluster's: one deleted and created again is another


class Unread(Verdict):
    """The Verdict of a kubeconfig Secret that could not be read for a reason that passes
    (a 5xx, 429, timeout or connection error from the manager's API server): asked again at
    the next pass, where a broken cluster waits for the probe period."""


def _status_conditions_changed(obj: Mapping[str, Any], v: Verdict) -> bool:
    c = condition_of(obj, ACTIVE)
    want = ("True" if v.active else "False", v.reason, v.message)
    return c is None or (c.get("status"), c.get("reason"), c.get("message")) != want


def _check_state(wl: Mapping[str, Any], names: set[str]) -> Obj | None:
    for st in (wl.get("status") or {}).get("admissionChecks") or []:
        if st.get("name") in names:
            return st
    return None


def _placed_without_quota(wl: Mapping[str, Any]) -> bool:
    """Not finished, no quota reserved, yet a worker or nominees recorded."""
    st = wl.get("status") or {}
    if not (st.get("clusterName") or st.get("nominatedClusterNames")) or is_finished(wl):
        return False
    c = condition_of(wl, QUOTA_RESERVED)
    return c is None or c.get("status") != "True"


class JobRef(NamedTuple):
    """The manager's job a Workload belongs to, from the Workload's controller reference:
    its kind's adapter, its name and its uid ("" when the reference names none)."""

    adapter: Adapter
    name: str
    uid: str

    def holds(self, job: Mapping[str, Any]) -> bool:
        """Whether ``job`` (the manager's object of that name) is this one: a job deleted
        and created again under the same name is another, whose own Workload mirrors it."""
        return not self.uid or (job.get("metadata") or {}).get("uid") == self.uid


def _owner(wl: Mapping[str, Any]) -> JobRef | None:
    """The Workload's job (``JobRef``), or None (no controller, or a kind MultiKueue does
    not dispatch)."""
    ref = controller_of_object(wl)
    a = adapter_for(ref.api_version, ref.kind) if ref is not None else None
    return JobRef(a, ref.name, ref.uid) if a is not None and ref is not None else None


def _resource(a: Adapter) -> Resource:
    return JOBS if a is BATCH_JOB else Resource(a.group, a.version, a.plural, a.kind)


class MultiKueueOff:
    """The writer of MultiKueue AdmissionChecks' ``Active`` condition while MultiKueue is off
    (its CRDs not served: ``app.controllers.manager`` ``OptionalApi``): each such check gets
    ``check_active_while_off`` (False, ``BadConfig``, "... MultiKueue is off until they
    are"), so ``kubectl get admissioncheck -o yaml`` says why its ClusterQueues admit
    nothing, and a check left True by an earlier run (MultiKueue on then) is corrected.
    Told of every AdmissionCheck change (``on_check``) and of all of them when this process
    starts leading (``enqueue_all``); writes only while ``ctx.may_write``.

    One writer at a time: the Manager makes this one only while MultiKueue is off and
    ``stop``s it (no write after, ``retired``) before the ``MultiKueueController`` starts,
    which from then on owns the condition (its first pass rewrites it from the config)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.queue = WorkQueue(base=0.2, cap=30.0)
        self.retired = False
        self._task: asyncio.Task[None] | None = None

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return [self._task] if self._task is not None else []

    def on_check(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """AdmissionCheck informer handler: a MultiKueue check added or changed (its status
        written by somebody else too) is looked at."""
        if not self.retired and new is not None and is_multikueue_check(new):
            self.queue.add(new["metadata"]["name"])

    def enqueue_all(self) -> None:
        if not self.retired:
            for ac in self.ctx.store(AC):
                self.on_check("ADDED", None, ac)

    def start(self) -> None:
        self._task = asyncio.create_task(
            work(self.queue, self.reconcile, may_write=lambda: self.ctx.may_write, log=log,
                 what="multikueue-off check"), name="multikueue-off")

    async def stop(self) -> None:
        """Retire for good: nothing is written once this returns (an in-flight write is
        cancelled)."""
        self.retired = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.queue.close()

    async def reconcile(self, name: str) -> float | None:
        """Write check ``name``'s ``Active`` condition when it says anything else."""
        ac = self.ctx.store(AC).get(name)
        if self.retired or ac is None or not is_multikueue_check(ac):
            return None
        verdict = check_active_while_off((ac.get("spec") or {}).get("parameters"))
        if not _status_conditions_changed(ac, verdict):
            return None
        body = copy.deepcopy(ac)
        set_condition(body, ACTIVE, "False", verdict.reason, verdict.message, self.ctx.clock())
        try:
            out = await self.ctx.client.replace(ADMISSION_CHECKS, body, subresource="status")
        except NotFound:
            return None
        self.ctx.store(AC).put(out)  # as the controller's: not rewritten from a stale copy
        return None


class MultiKueueController:
    """See the module doc. ``ctx``: the process's Context (client, stores, leader gate)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.s = ctx.settings.multikueue
        self.workers: dict[str, Worker] = {}
        # Workload key -> (its job, workers it was sent to), for the clean-up after it
        # finishes, loses its quota or is deleted.
        self.dispatched: dict[str, tuple[JobRef, set[str]]] = {}
        # Workloads done with (finished, or without quota) whose workers were looked at once.
        self.cleaned: set[str] = set()
        # Workloads seen Finished, kept while seen or dispatched (``_workload_gone``).
        self.finished: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._listed_at = -1e9
        # Workload key -> when its Incremental dispatcher round started (monotonic s).
        self.rounds: dict[str, float] = {}
        # Soonest dispatcher: Workload key -> the round (its start in ``rounds``) decided.
        self.soonest_decided: dict[str, float] = {}
        self.etas = WorkerEtas(ctx.client, self.s.namespace, self.s.probe_period_seconds)
        self._gc_at: float | None = None

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return [self._task] if self._task else []

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="multikueue")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for w in self.workers.values():
            if w.client is not None:
                await w.client.close()
        self.workers.clear()
        await self.etas.close()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.s.sync_period_seconds)
            if not self.ctx.may_write:
                continue
            try:
                await self.sync_once()
            except ApiError as exc:
                log.warning("multikueue: sync failed: %s", exc)
            except Exception:  # a bug must not end the loop: logged, tried again next period
                log.exception("multikueue: sync failed")

    def on_change(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        """Informer handler of MultiKueueClusters and MultiKueueConfigs: one added, deleted
        or whose spec or annotations changed is looked at on the next pass, also while
        nothing dispatches (those passes are else ``probe_period_seconds`` apart); a status
        written (this controller's) is no reason."""
        if etype == "MODIFIED" and old is not None and new is not None \
                and old.get("spec") == new.get("spec") \
                and (old.get("metadata") or {}).get("annotations") \
                == (new.get("metadata") or {}).get("annotations"):
            return
        self._listed_at = -1e9

    # ------------------------------------------------------------------ one pass

    async def sync_once(self) -> None:
        """One pass over clusters, checks and dispatched Workloads (see the module doc)."""
        checks = [ac for ac in self.ctx.store(AC) if is_multikueue_check(ac)]
        now = asyncio.get_running_loop().time()
        idle = not checks and not self.dispatched
        if idle and now - self._listed_at < self.s.probe_period_seconds:
            return  # nothing dispatches: the clusters' status is kept at the probe period
        self._listed_at = now
        # From the informers' stores (no API request, no client token): on a busy manager a
        # periodic list took tokens from the admission writes.
        clusters = list(self.ctx.store(MKC))
        configs = list(self.ctx.store(MKCFG))
        await self._sync_clusters(clusters)
        by_name = {c["metadata"]["name"]: c for c in configs}
        check_clusters: dict[str, list[str]] = {}
        for ac in checks:
            check_clusters[ac["metadata"]["name"]] = await self._sync_check(ac, by_name)
        seen: set[str] = set()
        finished: set[str] = set()
        for wl in self.ctx.store(WL):
            st = _check_state(wl, set(check_clusters))
            key = f"{wl['metadata']['namespace']}/{wl['metadata']['name']}"
            if is_finished(wl):
                finished.add(key)
            if _placed_without_quota(wl):
                await self._forget_placement(wl)
            if st is None:
                continue
            seen.add(key)
            try:
                await self._sync_workload(wl, st, check_clusters[st["name"]])
            except ApiError as exc:
                log.info("multikueue: workload %s: %s", key, exc)
            except Exception:  # noqa: BLE001 - one Workload must not stop the others' dispatch
                log.exception("multikueue: workload %s", key)
        for key in [k for k in self.dispatched if k not in seen]:
            await self._workload_gone(key)
        self.finished = {k for k in self.finished | finished if k in seen or k in self.dispatched}
        self.cleaned &= seen
        for key in [k for k in self.rounds if k not in seen]:
            self.rounds.pop(key, None)
        self.soonest_decided = {k: v for k, v in self.soonest_decided.items()
                                if self.rounds.get(k) == v}
        await self._maybe_gc(now)

    # ------------------------------------------------------------------ garbage collection

    async def _maybe_gc(self, now: float) -> None:
        """Every ``multikueue.gc_interval_seconds`` (0: never), the first one interval after
        the start: each connected worker's Workloads with this origin whose manager Workload
        is gone, being deleted or Finished (``gc_keeps``) are deleted, their job first (Kueue
        ``runGC``)."""
        if not self.s.gc_interval_seconds:
            return
        if self._gc_at is None:
            self._gc_at = now
        if now - self._gc_at < self.s.gc_interval_seconds:
            return
        self._gc_at = now
        store = self.ctx.store(WL)

        def alive(key: str) -> bool:
            return gc_keeps(store.get(key))
        for name, w in list(self.workers.items()):
            if w.client is None or not w.verdict.active:
                continue
            try:
                remote, _ = await w.client.list(
                    WORKLOADS, label_selector=f"{ORIGIN_LABEL}={self.s.origin}")
                for ns, wl_name, owner in gc_orphans(remote, self.s.origin, alive):
                    log.info("multikueue: gc: deleting %s/%s on %s", ns, wl_name, name)
                    if owner is not None:
                        with contextlib.suppress(NotFound):
                            await w.client.delete(_resource(owner[0]), owner[1], ns)
                    with contextlib.suppress(NotFound):
                        await w.client.delete(WORKLOADS, wl_name, ns)
            except ApiError as exc:
                log.info("multikueue: gc on %s: %s", name, exc)

    # ------------------------------------------------------------------ clusters

    async def _sync_clusters(self, clusters: list[Obj]) -> None:
        names = {c["metadata"]["name"] for c in clusters}
        for name in [n for n in self.workers if n not in names]:
            old = self.workers.pop(name)
            if old.client is not None:
                await old.client.close()
        await asyncio.gather(*(self._sync_cluster(c) for c in clusters))
        if self.s.dispatcher_name == SOONEST:
            await self.etas.refresh(clusters, asyncio.get_running_loop().time())

    async def _kubeconfig(self, cluster: Obj) -> tuple[Any, str] | Verdict:
        """The parsed kubeconfig of ``cluster`` and its hash, or the Verdict saying why not."""
        problem = cluster_source_problem(cluster.get("spec"), self.s.allow_kubeconfig_path)
        if problem is not None:
            return Verdict(False, *problem)
        ref = cluster["spec"]["clusterSource"]["kubeConfig"]
        location = str(ref["location"])
        if ref.get("locationType", "Secret") == "Path":
            try:
                with open(location, "rb") as f:  # noqa: ASYNC230 - small file, opt-in setting
                    raw = f.read()
            except OSError as exc:
                return Verdict(False, "BadKubeConfig", f"load client config failed: {exc}")
        else:
            try:
                secret = await self.ctx.client.get(SECRETS, location, self.s.namespace)
            except NotFound:
                return Verdict(False, "BadKubeConfig", 'load client config failed: secrets '
                               f'"{location}" not found')
            except (ApiError, TimeoutError, OSError) as exc:
                # This cluster only: the others are synced all the same. A failure that
                # passes (the manager's API server busy or restarting) is asked again at the
                # next pass, not after the probe period.
                why = Verdict if isinstance(exc, Permanent) else Unread
                return why(False, "BadKubeConfig", 'load client config failed: secrets '
                           f'"{location}": {str(exc) or type(exc).__name__}')
            data = (secret.get("data") or {}).get(KUBECONFIG_KEY)
            if data is None:
                return Verdict(False, "BadKubeConfig", "load client config failed: key "
                               f'"{KUBECONFIG_KEY}" not found in secret "{location}"')
            try:
                raw = base64.b64decode(data)
            except ValueError as exc:
                return Verdict(False, "BadKubeConfig", f"load client config failed: {exc}")
        try:
            parsed = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            parsed = None
            why: str | None = f"failed to parse kubeconfig(apiconfig): {exc}"
        else:
            why = kubeconfig_problem(parsed)
        if why is not None:
            return Verdict(False, "InsecureKubeConfig", f"load client config failed: {why}")
        return parsed, hashlib.sha256(raw).hexdigest()

    async def _sync_cluster(self, cluster: Obj) -> None:
        name = cluster["metadata"]["name"]
        w = self.workers.setdefault(name, Worker())
        now = asyncio.get_running_loop().time()
        generation = cluster["metadata"].get("generation")
        fresh = now - w.probed_at < self.s.probe_period_seconds
        # A worker whose spec did not change is looked at again (its Secret read, a probe
        # sent) once per probe period: a connected one, one that did not answer and one whose
        # kubeconfig is unusable (Secret or key missing, refused) alike; read every pass, a
        # broken one cost a client token a second. A spec changed (another Secret): at once.
        uid = cluster["metadata"].get("uid")  # created again under its name: generation 1
        if fresh and w.generation == generation and w.uid == uid:
            got: tuple[Any, str] | Verdict | None = None
        else:
            got = await self._kubeconfig(cluster)
        w.generation, w.uid = generation, uid
        if got is None:
            pass
        elif isinstance(got, Verdict):
            await self._drop_client(w)
            w.verdict = got
            w.probed_at = -1e9 if isinstance(got, Unread) else now
        elif got[1] != w.config_hash or w.client is None or not fresh:
            if got[1] != w.config_hash:
                await self._drop_client(w)
            w.config_hash = got[1]
            w.verdict = await self._connect(w, got[0])
            w.probed_at = now
        if _status_conditions_changed(cluster, w.verdict):
            body = copy.deepcopy(cluster)
            v = w.verdict
            set_condition(body, ACTIVE, "True" if v.active else "False", v.reason, v.message,
                          self.ctx.clock())
            with contextlib.suppress(ApiError):  # a conflict: written again next pass
                out = await self.ctx.client.replace(MULTIKUEUE_CLUSTERS, body,
                                                    subresource="status")
                # The next pass reads the store: not the old status (written again with the
                # old resourceVersion, a conflict) while the watch has not brought this one.
                self.ctx.store(MKC).put(out)

    @staticmethod
    async def _drop_client(w: Worker) -> None:
        if w.client is not None:
            await w.client.close()
        w.client, w.config_hash = None, ""

    async def _connect(self, w: Worker, kubeconfig: Any) -> Verdict:
        if w.client is None:
            try:
                w.client = await KubeClient.from_kubeconfig_dict(kubeconfig,
                                                                 self.ctx.settings.client)
            except Exception as exc:  # noqa: BLE001 - the loader raises many kinds
                return Verdict(False, "BadKubeConfig", f"load client config failed: {exc}")
        try:
            await asyncio.wait_for(w.client.request("GET", WORKLOADS.path(),
                                                    query={"limit": 1}), PROBE_TIMEOUT)
        except (ApiError, TimeoutError, OSError) as exc:
            return Verdict(False, "ClientConnectionFailed", str(exc) or type(exc).__name__)
        return Verdict(True, "Active", "Connected")

    def _active_clients(self, clusters: list[str]) -> dict[str, KubeClient]:
        return {n: w.client for n in clusters
                if (w := self.workers.get(n)) and w.client is not None and w.verdict.active}

    # ------------------------------------------------------------------ checks

    async def _sync_check(self, ac: Obj, configs: Mapping[str, Obj]) -> list[str]:
        """Write ``ac``'s Active condition; returns its config's clusters ([] without one)."""
        params = (ac.get("spec") or {}).get("parameters")
        problem = parameters_problem(params)
        clusters: list[str] = []
        if problem is None:
            cfg = configs.get(params["name"])
            if cfg is None:
                problem = f'multikueueconfigs.kueue.x-k8s.io "{params["name"]}" not found'
            else:
                clusters = list((cfg.get("spec") or {}).get("clusters") or [])
        verdict = check_active(problem, clusters,
                               {n: w.verdict.active for n, w in self.workers.items()})
        if _status_conditions_changed(ac, verdict):
            body = copy.deepcopy(ac)
            set_condition(body, ACTIVE, "True" if verdict.active else "False", verdict.reason,
                          verdict.message, self.ctx.clock())
            with contextlib.suppress(ApiError):  # a conflict: written again next pass
                out = await self.ctx.client.replace(ADMISSION_CHECKS, body,
                                                    subresource="status")
                # As the cluster's: the next pass reads the store, not the old status.
                self.ctx.store(AC).put(out)
        return clusters

    # ------------------------------------------------------------------ workloads

    async def _put_local(self, wl: Obj) -> None:
        out = await self.ctx.client.replace(WORKLOADS, wl, subresource="status")
        self.ctx.store(WL).put(out)

    async def _set_check(self, wl: Obj, name: str, state: str, message: str,
                         cluster: str | None = None, no_worker: bool | None = None) -> None:
        """Set check ``name``'s state and message (``cluster``: also ``status.clusterName``,
        nominees cleared; ``no_worker`` False: condition ``MultiKueueNoWorker``, when True,
        set False, a worker reserved)."""
        body = copy.deepcopy(wl)
        if no_worker is False and (c := condition_of(wl, NO_WORKER)) is not None \
                and c.get("status") == "True":
            set_condition(body, NO_WORKER, "False", "WorkerReserved",
                          f"Worker {cluster} reserved quota", self.ctx.clock())
        st = body.setdefault("status", {})
        for entry in st.get("admissionChecks") or []:
            if entry.get("name") == name:
                if entry.get("state") != state:
                    entry["lastTransitionTime"] = rfc3339(self.ctx.clock())
                entry.update(state=state, message=message)
        if cluster is not None:
            st["clusterName"] = cluster
            st.pop("nominatedClusterNames", None)
        await self._put_local(body)

    async def _sync_workload(self, wl: Obj, st: Obj, clusters: list[str]) -> None:
        meta = wl["metadata"]
        ns, key = meta["namespace"], f"{meta['namespace']}/{meta['name']}"
        reserved = (c := condition_of(wl, QUOTA_RESERVED)) is not None \
            and c.get("status") == "True"
        if is_finished(wl) or not reserved or meta.get("deletionTimestamp"):
            await self._remove_remotes(key, wl)
            if meta.get("deletionTimestamp") and not is_finished(wl) \
                    and key not in self.dispatched:
                # Deleted: once its copies are gone, so are the pods its job's status counts.
                await self._clear_running(ns, _owner(wl))
            return
        if st.get("state") == "Rejected":
            return
        evicted = condition_of(wl, "Evicted")
        if evicted is not None and evicted.get("status") == "True":
            # Evicted on the manager (deactivated, preempted...) while still holding quota:
            # the copies go, and the manager's Job no longer counts the worker's pods, so
            # its quota is released (Kueue evicts the worker's copy instead, then mirrors).
            await self._remove_remotes(key, wl)
            await self._clear_running(ns, _owner(wl))
            return
        owner = _owner(wl)
        if owner is None:
            await self._set_check(wl, st["name"], "Rejected", "No multikueue adapter found")
            return
        adapter, job_name, _ = owner
        res = _resource(adapter)
        local_job = self._stored(adapter, ns, job_name)
        if local_job is None:
            try:
                local_job = await self.ctx.client.get(res, job_name, ns)
            except NotFound:
                return
        if not owner.holds(local_job):
            return  # its job is gone: the job of that name is another, with its own Workload
        refused = adapter.not_managed_message(local_job)
        if refused is not None:
            await self._set_check(wl, st["name"], "Rejected", refused)
            return
        remotes = self._active_clients(clusters)
        if not remotes:
            return
        jobs, wls = await self._read_remotes(remotes, ns, res, job_name, meta["name"])
        placed = (wl.get("status") or {}).get("clusterName")
        finished = first_with(placed_copies(wls, placed), FINISHED)
        if finished is not None:
            await self._mirror(adapter, local_job, jobs[finished])
            done = condition_of(wls[finished], FINISHED) or {}
            body = copy.deepcopy(wl)
            set_condition(body, FINISHED, "True", str(done.get("reason") or "Succeeded"),
                          str(done.get("message") or ""), self.ctx.clock())
            await self._put_local(body)
            return
        if placed and st.get("state") == "Pending":
            # Evicted (its checks reset to Pending) and given quota again between two passes:
            # the old placement and its copies are stale (Kueue resets clusterName with the
            # eviction and deletes the copies once the quota is released). A copy still
            # admitted there is not reused: the Workload is dispatched afresh.
            await self._remove_remotes(key, wl)
            await self._forget_placement(wl)
            return
        redo = evicted_on_worker(st.get("state"), placed, wls)
        if redo is not None:
            # Evicted on its worker: the check goes Retry, so the manager evicts and requeues
            # the Workload (its copies go with the eviction, above) and dispatches it again.
            await self._set_check(wl, st["name"], "Retry", redo)
            self.ctx.recorder.emit(wl, NORMAL, "MultiKueue", redo)
            return
        winner = admitted_worker(wls, placed)
        if winner is not None:
            for name in [n for n in remotes if n != winner]:
                await self._delete_remote(remotes[name], ns, res, job_name, jobs.get(name),
                                          wls.get(name), meta["name"])
            # A worker not reached now (down, unreachable) keeps its place in the record:
            # its copies are deleted once it answers again (Kueue's reconciler on reconnect),
            # not left to run there beside the winner's.
            sent = self.dispatched.get(key, (owner, set()))[1]
            unreached = {n for n in sent if n != winner and n not in remotes}
            self.dispatched[key] = (owner, {winner} | unreached)
            status = wl.get("status") or {}
            if st.get("state") != "Ready" or status.get("clusterName") != winner:
                if st.get("state") not in ("Retry", "Rejected"):
                    message = f'The workload got reservation on "{winner}"'
                    await self._set_check(wl, st["name"], "Ready", message, cluster=winner,
                                          no_worker=False)
                    self.ctx.recorder.emit(wl, NORMAL, "MultiKueue", message)
            if jobs[winner] is None:
                # The job goes to the winner only, adopting its Workload copy there.
                await remotes[winner].create(
                    res, adapter.remote(local_job, self.s.origin, meta["name"]))
            else:
                await self._mirror(adapter, local_job, jobs[winner])
            return
        if (wl.get("status") or {}).get("clusterName"):
            # Its worker no longer has an admitted copy (gone, or the worker does not
            # answer): after workerLostTimeout the check goes Retry, so the manager evicts
            # and requeues the Workload (Kueue "Reserving remote lost").
            since = parse_time(st.get("lastTransitionTime"))
            if st.get("state") == "Ready" and worker_lost(
                    since, self.ctx.clock(), self.s.worker_lost_timeout_seconds):
                await self._set_check(wl, st["name"], "Retry", "Reserving remote lost")
            return
        if self.s.dispatcher_name == SOONEST:
            nominated = await self._nominate_soonest(wl, key, sorted(remotes), wls)
            for name in [n for n in remotes if n not in nominated and wls.get(n) is not None]:
                # Not the soonest: its copy (pending there) goes.
                await self._delete_remote(remotes[name], ns, res, job_name, jobs.get(name),
                                          wls.get(name), meta["name"])
        else:
            nominated = await self._nominate(wl, key, clusters, sorted(remotes))
        targets = {n: c for n, c in remotes.items() if n in nominated}
        self.dispatched.setdefault(key, (owner, set()))[1].update(targets)
        await self._no_worker(key, nominated)
        for name, client in targets.items():
            if wls.get(name) is None:
                try:
                    await client.create(WORKLOADS, remote_workload(wl, self.s.origin))
                except ApiError as exc:
                    log.info("multikueue: creating workload %s on %s: %s", key, name, exc)

    async def _workload_gone(self, key: str) -> None:
        """Workload ``key`` was deleted (gone from the store, its copies recorded in
        ``dispatched``): its copies are deleted on every worker (``_remove_remotes``) and,
        once none is left, the running-pod counts mirrored on its job are cleared
        (``_clear_running``), unless it was last seen Finished (``finished``: a finished
        job's mirrored status says how it ended). Nothing else writes them again once the
        copies are gone: the job's stop (its template restored only with ``status.active``
        0 on Kubernetes v1.36) and its new Workload (created once no pod is counted) would
        wait for good. Beyond Kueue v0.17.1, where the job waits so (it mirrors a worker's
        status only while the copy exists)."""
        entry = self.dispatched.get(key)
        await self._remove_remotes(key)
        if entry is not None and key not in self.dispatched and key not in self.finished:
            await self._clear_running(key.split("/", 1)[0], entry[0])

    async def _clear_running(self, ns: str, owner: JobRef | None) -> None:
        """Clear the running-pod counts mirrored on the manager's job ``owner`` (its pods ran
        on a worker: ``Adapter.running_status``), only while the job of that name is that
        one: a job deleted and created again under the same name is another, whose mirrored
        counts its own Workload keeps. The uid is checked on the copy read and,
        for a job replaced since, by the API server: a JSON Patch whose first operation
        ``test``s ``/metadata/uid`` (a merge patch's ``metadata.uid`` is no precondition
        on a custom resource's status subresource, whose strategy keeps the stored
        metadata). A mismatch there answers 422, taken as "not ours", as every other API
        error: the next pass reads again."""
        if owner is None:
            return
        adapter, name, uid = owner
        with contextlib.suppress(ApiError):
            job = self._stored(adapter, ns, name) \
                or await self.ctx.client.get(_resource(adapter), name, ns)
            status = (job or {}).get("status") or {}
            clear = [k for k in adapter.running_status if status.get(k)]
            if job is None or not clear or not owner.holds(job):
                return
            ops = [{"op": "test", "path": "/metadata/uid", "value": uid}] if uid else []
            ops += [{"op": "remove", "path": f"/status/{k}"} for k in clear]
            await self.ctx.client.patch(_resource(adapter), name, ops, ns,
                                        content_type=JSON_PATCH, subresource="status")

    def _stored(self, adapter: Adapter, ns: str, name: str) -> Obj | None:
        """The manager's job ``ns/name`` from its kind's informer (key ``job``, or the kind
        lower-cased: ``jobset``, ``pytorchjob``...), None when not stored or not watched."""
        key = JOB if adapter is BATCH_JOB else adapter.kind.lower()
        if key not in self.ctx.informers.informers:
            return None
        return self.ctx.store(key).get(f"{ns}/{name}")  # type: ignore[no-any-return]

    async def _forget_placement(self, wl: Obj) -> None:
        """A Workload that lost its quota (evicted, preempted, requeued) forgets its worker:
        ``status.clusterName`` and ``nominatedClusterNames`` are reset (Kueue resets them with
        the quota reservation), so it is dispatched afresh once it holds quota again."""
        self.rounds.pop(f"{wl['metadata']['namespace']}/{wl['metadata']['name']}", None)
        body = copy.deepcopy(wl)
        body["status"].pop("clusterName", None)
        body["status"].pop("nominatedClusterNames", None)
        try:
            await self._put_local(body)
        except ApiError as exc:
            log.info("multikueue: resetting the worker of %s: %s", wl["metadata"]["name"], exc)

    async def _nominate(self, wl: Obj, key: str, clusters: list[str], active: list[str]
                        ) -> list[str]:
        """Write and return ``status.nominatedClusterNames``, the workers that get a copy.
        AllAtOnce: every ``active`` worker (Kueue). Incremental (Kueue
        ``IncrementalDispatcherReconciler``): at the start of each round
        (``multikueue.incremental_round_seconds``, ``round_due``) the next
        ``incremental_batch_size`` workers of the config's ``clusters`` (``next_nominees``)
        are appended; between rounds, the nominees stay."""
        current = list((wl.get("status") or {}).get("nominatedClusterNames") or [])
        if self.s.dispatcher_name == INCREMENTAL:
            now = asyncio.get_running_loop().time()
            if not round_due(self.rounds.get(key), now, self.s.incremental_round_seconds):
                return current
            new = next_nominees(clusters, current, self.s.incremental_batch_size)
            if not new:
                return current
            names = current + new
            self.rounds[key] = now
        else:
            names = active
        if current != names:
            body = copy.deepcopy(wl)
            body.setdefault("status", {})["nominatedClusterNames"] = names
            await self._put_local(body)
        return names

    async def _nominate_soonest(self, wl: Obj, key: str, active: list[str],
                                wls: Mapping[str, Obj | None]) -> list[str]:
        """Write and return ``status.nominatedClusterNames`` under the soonest dispatcher
        (pykueue's). A round starts with every ``active`` worker (copies sent as AllAtOnce),
        at once, then every ``multikueue.soonest_round_seconds``, or when none of its
        nominees is connected any more. Until the round is decided, each pass asks
        every nominee with a copy for its ETA (``WorkerEtas``; no copy yet: still to come)
        and ``soonest_keep`` decides, waiting up to ``soonest_patience_seconds`` for ETAs
        still being computed: the soonest worker and those giving no ETA are kept, the
        others' copies deleted by the caller. A decided round's nominees stay."""
        current = list((wl.get("status") or {}).get("nominatedClusterNames") or [])
        now = asyncio.get_running_loop().time()
        started = self.rounds.get(key)
        names, decided = current, False
        if round_due(started, now, self.s.soonest_round_seconds) \
                or not any(n in active for n in current):
            names, self.rounds[key] = active, now
        elif started is not None and self.soonest_decided.get(key) != started:
            asked = [n for n in current if n in active]
            have = [n for n in asked if wls.get(n) is not None]
            got = await self.etas.etas(have, wl["metadata"]["namespace"],
                                       wl["metadata"]["name"])
            for n in asked:
                got.setdefault(n, WorkerEta(None, "no copy yet", later=True))
            keep = soonest_keep(got, now - started, self.s.soonest_patience_seconds)
            if keep is not None:
                names, decided = keep, True
                log.info("multikueue: %s kept on %s (%s)", key, ", ".join(keep),
                         "; ".join(f"{n}: {e.wait:.0f}s" if e.wait is not None
                                   else f"{n}: {e.why}" for n, e in sorted(got.items())))
        if current != names:
            body = copy.deepcopy(wl)
            body.setdefault("status", {})["nominatedClusterNames"] = names
            await self._put_local(body)
        if decided:
            self.soonest_decided[key] = self.rounds[key]
        return names

    async def _no_worker(self, key: str, nominated: list[str]) -> None:
        """Condition ``MultiKueueNoWorker`` True on a Workload no worker reserved within its
        ClusterQueue's ``multikueue.no_worker_timeout_seconds`` (pykueue's; unset: Kueue,
        nothing said), from its quota reservation on the manager (``no_worker_condition``)."""
        wl = self.ctx.store(WL).get(key)
        if wl is None or not self.s.no_worker_timeout_seconds:
            return
        cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
        reserved = condition_of(wl, QUOTA_RESERVED) or {}
        said = no_worker_condition(parse_time(reserved.get("lastTransitionTime")),
                                   self.ctx.clock(), self.s.no_worker_timeout_seconds.get(cq),
                                   nominated)
        have = condition_of(wl, NO_WORKER) or {}
        if said is None or (have.get("status"), have.get("message")) == ("True", said[1]):
            return
        body = copy.deepcopy(wl)
        set_condition(body, NO_WORKER, "True", *said, self.ctx.clock())
        await self._put_local(body)
        self.ctx.recorder.emit(wl, NORMAL, NO_WORKER, said[1])

    async def _read_remotes(self, remotes: Mapping[str, KubeClient], ns: str, res: Resource,
                            job_name: str, wl_name: str
                            ) -> tuple[dict[str, Obj | None], dict[str, Obj | None]]:
        """Each worker's copy of the job (of resource ``res``) and of the Workload (None
        where absent)."""
        async def get(client: KubeClient, res: Any, name: str) -> Obj | None:
            try:
                return await client.get(res, name, ns)
            except NotFound:
                return None

        async def one(client: KubeClient) -> tuple[Obj | None, Obj | None]:
            job, wl = await asyncio.gather(get(client, res, job_name),
                                           get(client, WORKLOADS, wl_name))
            return job, wl
        got = await asyncio.gather(*(one(c) for c in remotes.values()))
        names = list(remotes)
        return ({n: g[0] for n, g in zip(names, got, strict=True)},
                {n: g[1] for n, g in zip(names, got, strict=True)})

    async def _mirror(self, adapter: Adapter, local_job: Obj, remote: Obj | None) -> None:
        """Copy the worker job's status to the manager's (Kueue's adapters' ``SyncJob``)."""
        if remote is None:
            return
        want = adapter.status_to_mirror(local_job, remote)
        if want is None:
            return
        meta = local_job["metadata"]
        await self.ctx.client.patch(_resource(adapter), meta["name"], {"status": want},
                                    meta["namespace"], subresource="status")

    async def _delete_remote(self, client: KubeClient, ns: str, res: Resource, job_name: str,
                             job: Obj | None, wl: Obj | None, wl_name: str) -> None:
        """Delete a worker's copy of the job (in the background: its pods go with it) and of
        the Workload; absent ones are ignored. A job of that name this manager did not make
        (no ``kueue.x-k8s.io/multikueue-origin: <origin>`` label: the team's own, submitted
        to the worker) is left alone; Kueue v0.17.1 deletes it by name (breaker15). So is
        one made for another Workload than ``wl_name`` (the manager's Workload; its
        ``kueue.x-k8s.io/prebuilt-workload-name`` label): the copy of a job deleted and
        created again under the same name, which the new job's Workload owns."""
        labels = ((job or {}).get("metadata") or {}).get("labels") or {}
        if job is not None and labels.get(ORIGIN_LABEL) == self.s.origin \
                and labels.get(PREBUILT_LABEL) in (None, "", wl_name):
            with contextlib.suppress(NotFound):
                await client.delete(res, job_name, ns, uid=job["metadata"].get("uid"))
        if wl is not None:
            with contextlib.suppress(NotFound):
                await client.delete(WORKLOADS, wl["metadata"]["name"], ns)

    async def _remove_remotes(self, key: str, wl: Obj | None = None) -> None:
        """Delete the copies of Workload ``key``'s Job on every worker it was sent to: those
        recorded in this process, else (``wl``, once: after a restart) its
        ``status.clusterName`` and ``nominatedClusterNames``."""
        entry = self.dispatched.get(key)
        if entry is None and wl is not None and key not in self.cleaned:
            self.cleaned.add(key)
            st = wl.get("status") or {}
            sent_to = {n for n in [st.get("clusterName"), *(st.get("nominatedClusterNames")
                                                            or [])] if n}
            owner = _owner(wl)
            if owner and sent_to:
                entry = self.dispatched[key] = (owner, sent_to)
        job, sent = entry or (JobRef(BATCH_JOB, "", ""), set())
        adapter, job_name = job.adapter, job.name
        ns = key.split("/", 1)[0]
        for name in list(sent):
            w = self.workers.get(name)
            if w is None or w.client is None:
                continue  # not connected: the garbage collection deletes them once Finished
            try:
                res = _resource(adapter)
                jobs, wls = await self._read_remotes({name: w.client}, ns, res, job_name,
                                                     key.split("/", 1)[1])
                await self._delete_remote(w.client, ns, res, job_name, jobs[name], wls[name],
                                          key.split("/", 1)[1])
                sent.discard(name)
            except ApiError as exc:
                log.info("multikueue: removing %s from %s: %s", key, name, exc)
        if not sent:
            self.dispatched.pop(key, None)
        self.rounds.pop(key, None)
