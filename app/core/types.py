"""Typed names shared by the admission core (design.md: "Typed names").

All plain ``str`` at run time; ``NewType`` keeps signatures honest for readers and checkers.
"""

from __future__ import annotations

from typing import NamedTuple, NewType

ClusterQueueName = NewType("ClusterQueueName", str)
CohortName = NewType("CohortName", str)
FlavorName = NewType("FlavorName", str)
ResourceName = NewType("ResourceName", str)
# "<namespace>/<name>" of a Workload.
WorkloadKey = NewType("WorkloadKey", str)


class FlavorResource(NamedTuple):
    """A (flavor, resource) pair: the unit in which quota is defined and used.

    A ``NamedTuple`` (immutable, ordered, hashed in C: it keys every quota dict of the core).
    """

    flavor: FlavorName
    resource: ResourceName

    def __str__(self) -> str:
        return f"{self.resource} in flavor {self.flavor}"
