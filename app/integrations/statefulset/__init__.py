"""apps/v1 StatefulSet: its pods are one pod group sized by ``spec.replicas`` (``rules``)."""
