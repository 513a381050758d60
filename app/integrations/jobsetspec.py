"""A JobSet spec read as podSets (Kueue ``pkg/controller/jobs/jobset`` ``PodSets``,
kueue-integrations.md 5): shared by the JobSet kind and the kinds whose operator makes a JobSet
(TrainJob: Kueue takes the podSets of the child JobSet the trainer would build).

PodSets: one per replicatedJob, in spec order, named after it lower-cased (Kueue
``NewPodSetReference``), ``count = replicas x min(parallelism, completions)`` (replicas default
1, parallelism default 1), at most 8 (the Workload's podSets limit).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.integrations.templated import MAX_POD_SETS, Path, Template
from app.wire.fields import WorkloadSpecError, integer, mapping, sequence, string
from app.wire.workload import job_pod_count


def replicated_jobs(js: Mapping[str, Any], where: str = "spec") -> list[Mapping[str, Any]]:
    """``<where>.replicatedJobs`` of JobSet-shaped ``js`` (its ``spec`` at ``where``) checked:
    1..8 entries, each with a ``name`` and a ``template.spec``. Raises ``WorkloadSpecError``
    naming the field."""
    spec = mapping(js.get("spec"), where, required=True)
    rjobs = list(sequence(spec.get("replicatedJobs"), f"{where}.replicatedJobs"))
    if not rjobs:
        raise WorkloadSpecError(f"{where}.replicatedJobs", "required (at least one)")
    if len(rjobs) > MAX_POD_SETS:
        raise WorkloadSpecError(f"{where}.replicatedJobs", f"{len(rjobs)} replicatedJobs: a "
                                f"Workload holds at most {MAX_POD_SETS} podSets")
    out = []
    for i, rj in enumerate(rjobs):
        at = f"{where}.replicatedJobs[{i}]"
        rj = mapping(rj, at, required=True)
        if not string(rj.get("name"), f"{at}.name"):
            raise WorkloadSpecError(f"{at}.name", "required")
        mapping(mapping(rj.get("template"), f"{at}.template", required=True).get("spec"),
                f"{at}.template.spec", required=True)
        out.append(rj)
    return out


def child_job_pod_template(js: Mapping[str, Any], name: str, job: Mapping[str, Any],
                           where: str = "spec") -> Any:
    """The pod template (``replicatedJobs[].template.spec.template``) of JobSet-shaped ``js``
    that jobset v0.11.1 makes batch Job ``job`` from when the JobSet is named ``name``: the
    replicatedJob ``rj`` with an index below its ``replicas`` for which ``job`` is named
    ``<name>-<rj>-<index>`` (``GenJobName``); None for any other Job. Raises
    ``WorkloadSpecError``."""
    job_name = str((job.get("metadata") or {}).get("name", ""))
    for i, rj in enumerate(replicated_jobs(js, where)):
        prefix = f"{name}-{rj['name']}-"
        index = job_name[len(prefix):] if job_name.startswith(prefix) else ""
        replicas = integer(rj.get("replicas"), f"{where}.replicatedJobs[{i}].replicas",
                           default=1, minimum=0)
        if index.isdigit() and str(int(index)) == index and int(index) < replicas:
            return rj["template"]["spec"].get("template")
    return None


def replicated_job_pods(rj: Mapping[str, Any], where: str) -> int:
    """``replicas x min(parallelism, completions)`` of one replicatedJob at ``where``."""
    replicas = integer(rj.get("replicas"), f"{where}.replicas", default=1, minimum=0)
    try:
        per_job = job_pod_count(rj["template"])
    except WorkloadSpecError as exc:
        raise WorkloadSpecError(f"{where}.template.{exc.field}",
                                str(exc).split(": ", 1)[-1]) from None
    return replicas * per_job


def jobset_templates(js: Mapping[str, Any], root: Path = (), where: str = "spec"
                     ) -> list[Template]:
    """One ``Template`` per replicatedJob of JobSet-shaped ``js`` (module doc), its path
    prefixed with ``root`` (where ``js`` sits in the object the kind reads). Raises
    ``WorkloadSpecError``."""
    return [Template(str(rj["name"]).lower(),
                     replicated_job_pods(rj, f"{where}.replicatedJobs[{i}]"),
                     (*root, "spec", "replicatedJobs", i, "template", "spec", "template"),
                     str(rj["name"]))
            for i, rj in enumerate(replicated_jobs(js, where))]
