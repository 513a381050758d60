"""The kube-scheduler extender's rules (``rules``: pure filter and prioritize over plain
ExtenderArgs JSON) and its node store (``nodestore``: nodes by flavor, kept from the watch)."""
