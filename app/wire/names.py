"""Kueue's API names: group, version, labels, annotations, scheduling gate and finalizers
(Kueue v1beta2, ``pkg/constants`` and ``pkg/controller/jobs/pod/constants``;
kueue-integrations.md 2.1), one place for the readers, the job kinds and the controllers."""

KUEUE_GROUP = "kueue.x-k8s.io"
WORKLOAD_API_VERSION = "kueue.x-k8s.io/v1beta2"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-completions-equal-parallelism"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# A job adopts the Workload this label names instead of creating one (Kueue jobframework;
# pykueue: batch/v1 Jobs only, the MultiKueue worker protocol).
PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
RESOURCE_IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"
MAIN_POD_SET = "main"

# Labels the Job controller puts on the pod template; they differ per Job object, so Kueue
# drops them from the Workload's copy of the template (reference 4.3).
JOB_CONTROLLER_LABELS = frozenset(
    {"controller-uid", "batch.kubernetes.io/controller-uid", "job-name"}
)

# The labels by which the Job controller selects a Job's pods, newest first: the Job's uid.
JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
# The labels naming a Job on its pods (the Job controller's), newest first.
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
# The labels JobSet (v0.11.1) puts on its Jobs' pods: the JobSet's name and uid.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
# The garbage collector's finalizer on an object deleted with propagationPolicy Orphan
# (Kubernetes metav1.FinalizerOrphanDependents): it removes the dependents' references first.
ORPHAN_FINALIZER = "orphan"

ADMISSION_GATE = "kueue.x-k8s.io/admission"
MANAGED_LABEL = "kueue.x-k8s.io/managed"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
ROLE_HASH_ANNOTATION = "kueue.x-k8s.io/role-hash"
FAST_ADMISSION_ANNOTATION = "kueue.x-k8s.io/pod-group-fast-admission"
SERVING_ANNOTATION = "kueue.x-k8s.io/pod-group-serving"
SUSPENDING_PARENT = "kueue.x-k8s.io/pod-suspending-parent"
PODSET_LABEL = "kueue.x-k8s.io/podset"
# pykueue's start record on a started object: what the user wrote in each pod template before
# the admission's flavors were injected (app.integrations.batchjob.job).
ORIGINAL_ANNOTATION = "pykueue.dev/original-pod-scheduling"
# pykueue's record on a MultiKueue Workload copy a worker's Job adopted: that Job's uid
# (app.integrations.unsupported.adoptable_copy: no other Job adopts the copy after it).
ADOPTED_BY_ANNOTATION = "pykueue.dev/adopted-by"
# pykueue's record on a child Job it held below its share (app.integrations.reconciler
# ``_hold_to_share``): "<the spec.parallelism it had>:<the one pykueue set>", counts, to set
# back once the share allows.
HELD_PARALLELISM_ANNOTATION = "pykueue.dev/held-parallelism"
