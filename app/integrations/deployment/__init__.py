"""apps/v1 Deployment: its pods are queued as plain Pods (``rules``); no Workload of its own."""
