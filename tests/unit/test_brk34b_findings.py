"""brk34b (session 34, against b531f16): breaking the held-parallelism restore
(``JobReconciler._hold_to_share``, annotation ``pykueue.dev/held-parallelism``).

H2: ``_held_parallelism`` accepts what ``str.isdigit`` takes, and ``int`` refuses some of it
(a superscript digit: ``"²".isdigit()`` is True, ``int("²")`` raises ``ValueError``).
Closed in session 34: the annotation is read as ASCII digits of at most nine places
(``_HELD_FORM``); anything else is no record, and the Job is set back to its share. It is
read before the set-back, so a tenant (``edit`` in its namespace) who writes
``pykueue.dev/held-parallelism: "²:1"`` on a child Job of an admitted ancestor and raises its
``spec.parallelism`` makes every reconcile of that Job raise: the Job is never set back to its
share and runs every pod it asks for. The webhook refuses such a raise only for a child Job
carrying the queue label; the Jobs an operator makes (a JobSet's, an AppWrapper's wrapped
Job, an MPIJob's launcher, a RayJob's submitter) carry none, so the reconciler is the only
guard (docs/security.md "Managed ancestors"). ASCII digits do it too: more than 4,300 of them
(Python's ``int`` string-conversion limit) raise the same ``ValueError``.

Lab (brk34b, jobset v0.11.1): JobSet ``attack`` (replicatedJob ``w``: parallelism 1,
completions 8, 1 GPU a pod) admitted on 1 GPU; the tenant annotates Job ``attack-w-0`` with
``"²:1"`` and patches its parallelism to 4: 4 GPUs Running, parallelism 4, in each of 10
samples over 30 s, pykueue logging ``reconcile jobchild:.../attack-w-0 failed (invalid literal
for int() with base 10: '²'); retry in 30.00s``. The same patch without the annotation
(JobSet ``base``): set back to 1 at once, 1 GPU Running."""

from __future__ import annotations

import copy

import pytest

from app.integrations.appwrapper.appwrapper import KIND
from app.wire.names import HELD_PARALLELISM_ANNOTATION
from tests.unit.test_appwrapper import aw, job
from tests.unit.test_brk30b_findings import DEPLOYED, _as_created, _reconciler


@pytest.mark.parametrize("had", ["\u00b2", "9" * 5000], ids=["superscript", "5000-digits"])
async def test_a_malformed_held_annotation_does_not_stop_the_set_back(had: str) -> None:
    """AppWrapper t/aw running with Job component ``j`` (share 2): the tenant writes
    ``pykueue.dev/held-parallelism: "<had>:1"`` (a superscript two; 5,000 nines) and
    ``spec.parallelism: 8`` on the Job. It is set back to 2 (as without the annotation)."""
    running = {**aw(job("j", 2)), "status": {"phase": "Running", "componentStatus": [
        {"name": "j", "conditions": copy.deepcopy(DEPLOYED)}]}}
    running["spec"] = {**running["spec"], "suspend": False}
    raised = _as_created(job("j", 2), "t", "aw", "u1")
    raised["spec"].update(parallelism=8)
    raised["metadata"].update(annotations={HELD_PARALLELISM_ANNOTATION: f"{had}:1"})
    rec = _reconciler()
    await rec._hold_to_share(raised, KIND, running)
    assert rec.ctx.client.replaced and rec.ctx.client.replaced[-1]["spec"]["parallelism"] == 2
