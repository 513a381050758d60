"""Kueue's label, annotation and scheduling-gate names for Pods and their owners
(``pkg/controller/jobs/pod/constants``, kueue-integrations.md 2.1), shared by the kinds."""

ADMISSION_GATE = "kueue.x-k8s.io/admission"
MANAGED_LABEL = "kueue.x-k8s.io/managed"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
ROLE_HASH_ANNOTATION = "kueue.x-k8s.io/role-hash"
FAST_ADMISSION_ANNOTATION = "kueue.x-k8s.io/pod-group-fast-admission"
SERVING_ANNOTATION = "kueue.x-k8s.io/pod-group-serving"
SUSPENDING_PARENT = "kueue.x-k8s.io/pod-suspending-parent"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
