"""Readers of the wire: plain JSON dicts (Kueue v1beta2 objects, core/v1 pod templates) ->
the core's domain types, ONE reader per kind, used by the controllers, the job kinds, the
extender and the simulator alike.

- ``queues``: ResourceFlavor, ClusterQueue, Cohort, LocalQueue, label selectors, tolerations
  and taints of flavors.
- ``podtemplate``: pod requests, tolerations, node affinity -> ``PodSet``.
- ``podadjust``: Kueue's adjustment of a pending Workload's pods before they are counted
  (RuntimeClass overhead, LimitRange defaults) and its checks of their requests.
- ``workload``: the Workload object both ways, Kueue's naming and priority rules.
- ``names``: Kueue's label, annotation, gate and finalizer names.
- ``owners``: an object's controller ownerReference.
- ``fields``: strict JSON value readers and ``WorkloadSpecError``.

Pure: imports ``app.core`` and the standard library only (an import-linter contract).
"""
