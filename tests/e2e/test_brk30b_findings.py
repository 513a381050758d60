"""brk30b H2 and H3 on the lab (closed): before its AppWrapper is admitted, a tenant creates,
suspended and with a controller ownerReference to it, a Job (or JobSet) of the name of one of
its fixed-name Job (JobSet) components, its pods asking 8 GPUs where the component's ask 1.
appwrapper v1.2.0 would adopt it by name once admitted (AlreadyExists, the reference's name
checked) and it would run pods no quota covers. Both creates are refused by the API server,
through the webhooks ``vappwrapper-wrapped-job`` and ``vappwrapper-wrapped-jobset`` (unlabelled
objects an AppWrapper controls; the unit tests are tests/unit/test_appwrapper_child_templates.py
and test_brk30b_findings.py). The AppWrapper here waits on a LocalQueue that does not exist,
so it stays queued and suspended throughout. H1's part that was pykueue's own (closed): an
AppWrapper whose component carries a queue name no webhook lets its controller create it
under is refused at create."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_appwrapper import QUEUE, aw_operator, aw_queue  # noqa: F401
from tests.e2e.test_workload_kinds import LONG, TOLERATION
from tests.labfixture import LabHandle, wait_for

pytestmark = pytest.mark.lab
AW_API = "workload.codeflare.dev/v1beta2"


def _pod(gpus: str) -> dict:
    gpu = {"nvidia.com/gpu": gpus}
    return {"metadata": LONG, "spec": {"restartPolicy": "Never", "tolerations": [TOLERATION],
                                       "containers": [{"name": "c", "image": "busybox",
                                                       "resources": {"requests": gpu,
                                                                     "limits": gpu}}]}}


def _job(name: str, gpus: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": 1, "completions": 1, "template": _pod(gpus)}}


def _jobset(name: str, gpus: str) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {
                "spec": {"parallelism": 1, "completions": 1, "template": _pod(gpus)}}}]}}


def _under(obj: dict, ns: str, uid: str, *, aw: str = "adopt", suspend: bool = True) -> str:
    """``obj`` as the tenant creates it (suspended unless ``suspend`` is False), controlled by
    AppWrapper ``aw`` of uid ``uid``, as JSON for ``kubectl create -f -``."""
    out = json.loads(json.dumps(obj))
    out["metadata"].update(namespace=ns, ownerReferences=[
        {"apiVersion": AW_API, "kind": "AppWrapper", "name": aw, "uid": uid,
         "controller": True}])
    out["spec"]["suspend"] = suspend
    return json.dumps(out)


def queued_appwrapper(lab: LabHandle, ns: str, name: str, templates: list[dict]) -> str:
    """Create AppWrapper ``name`` in ``ns`` with one component per template, labelled for a
    LocalQueue that does not exist (so it stays queued); assert pykueue's webhook suspended it
    and return its uid."""
    lab.apply(json.dumps({
        "apiVersion": AW_API, "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE: "nowhere"}},
        "spec": {"suspend": False, "components": [{"template": t} for t in templates]}}))
    aw = lab.get("appwrapper", name, "-n", ns)
    assert aw["spec"]["suspend"] is True  # queued: pykueue's webhook suspended it
    return aw["metadata"]["uid"]


def test_a_job_or_jobset_of_a_components_name_with_bigger_pods_cannot_be_created(
        lab: LabHandle, aw_queue: str) -> None:  # noqa: F811
    ns = aw_queue
    uid = queued_appwrapper(lab, ns, "adopt", [_job("adopt-j", "1"), _jobset("adopt-js", "1")])
    # pykueue's stores must show the AppWrapper before its rules can name it.
    wait_for(lambda: "sized for pods requesting" in lab.kubectl(
        "create", "--dry-run=server", "-f", "-", input=_under(_job("adopt-j", "8"), ns, uid),
        check=False).stderr, 30, "the Job webhook refusing adopt-j with 8 GPUs (dry run)")

    job = lab.kubectl("create", "-f", "-", input=_under(_job("adopt-j", "8"), ns, uid),
                      check=False)
    assert job.returncode != 0
    assert "vappwrapper-wrapped-job.pykueue.io" in job.stderr \
        and "spec.template" in job.stderr and "'nvidia.com/gpu': 8" in job.stderr, job.stderr
    jobset = lab.kubectl("create", "-f", "-", input=_under(_jobset("adopt-js", "8"), ns, uid),
                         check=False)
    assert jobset.returncode != 0
    assert "vappwrapper-wrapped-jobset.pykueue.io" in jobset.stderr \
        and "spec.replicatedJobs" in jobset.stderr, jobset.stderr
    assert not lab.get("jobs", "-n", ns)["items"]
    assert not lab.get("jobsets", "-n", ns)["items"]

    # The same pods as the components' pass (what the controller would create).
    same = lab.kubectl("create", "--dry-run=server", "-f", "-",
                       input=_under(_jobset("adopt-js", "1"), ns, uid), check=False)
    assert same.returncode == 0, same.stderr


def test_h1_an_appwrapper_whose_component_no_webhook_would_let_be_created_is_refused(
        lab: LabHandle, aw_queue: str) -> None:  # noqa: F811
    """brk30b H1, pykueue's own part (closed): an AppWrapper whose Job component carries the
    queue name ``Not_A_Queue`` (no valid LocalQueue name: the Job webhook would refuse
    appwrapper v1.2.0's create of it with 403, retried as not fatal for as long as the
    tenant's annotations say, holding a later ``generateName`` component's prefix open) is
    refused at create, naming the component's label; the same AppWrapper with a valid name
    in that label is created."""
    side = _job("side", "1")
    side["metadata"]["labels"] = {QUEUE: "Not_A_Queue"}
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"generateName": "dep-"},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "h1"}},
                    "template": {**_pod("1"), "metadata": {"labels": {"app": "h1"}}}}}
    aw = {"apiVersion": AW_API, "kind": "AppWrapper",
          "metadata": {"name": "h1", "namespace": aw_queue, "labels": {QUEUE: "lq"}},
          "spec": {"suspend": True, "components": [{"template": side}, {"template": dep}]}}
    made = lab.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(aw),
                       check=False)
    assert made.returncode != 0
    assert "spec.components[0].template.metadata.labels[kueue.x-k8s.io/queue-name]" \
        in made.stderr and "Not_A_Queue" in made.stderr, made.stderr
    side["metadata"]["labels"] = {QUEUE: "lq"}
    made = lab.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(aw),
                       check=False)
    assert made.returncode == 0, made.stderr
