"""pykueue: GPU job queueing with fair-share quotas for Kubernetes (Kueue v1beta2 API)."""
