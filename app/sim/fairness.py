"""Each queue's share of a cohort's capacity over time against its fair share (weighted
water-filling), for fair-sharing runs of the simulator.

``FairnessProbe`` is an ``on_cycle`` hook of ``Simulator``: at every instant it samples, per
ClusterQueue of ``queues``, the usage of ``resource`` (across flavors) and the demand (usage
plus the requests of its pending Workloads). The fair share at an instant gives the
capacity to the queues with demand in proportion to their weights, never more than a
queue's demand, handing what a queue cannot use to the others (weighted max-min fairness,
the allocation Kueue's DRS ordering and fair-sharing preemption converge to with one
resource). ``report()`` returns, per queue, the time-averaged measured and fair share in
percent of ``capacity`` and their difference in points, over the instants where the queues
together wanted more than the capacity (where fairness is decided), and over the whole run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.types import ClusterQueueName, ResourceName


def fair_allocation(capacity: int, demand: Mapping[str, int],
                    weights: Mapping[str, int]) -> dict[str, float]:
    """Weighted max-min allocation of ``capacity`` over ``demand`` (same unit); a queue with
    weight 0 gets only what the others leave."""
    alloc = {q: 0.0 for q in demand}
    left = float(capacity)
    open_ = {q for q, d in demand.items() if d > 0 and weights.get(q, 0) > 0}
    while open_ and left > 1e-9:
        total_w = sum(weights[q] for q in open_)
        step = {q: left * weights[q] / total_w for q in open_}
        done = {q for q in open_ if demand[q] - alloc[q] <= step[q] + 1e-9}
        if not done:
            for q in open_:
                alloc[q] += step[q]
            left = 0.0
            break
        for q in done:
            left -= demand[q] - alloc[q]
            alloc[q] = float(demand[q])
        open_ -= done
    for q, d in demand.items():  # weight 0: leftovers only
        if d > 0 and weights.get(q, 0) == 0 and left > 0:
            alloc[q] = min(float(d), left)
            left -= alloc[q]
    return alloc


@dataclass
class FairnessProbe:
    """Samples usage and demand of ``queues`` for ``resource``; see the module docstring.
    Call ``bind(sim)`` before ``sim.run()`` and pass ``probe`` as its ``on_cycle``."""

    queues: Sequence[ClusterQueueName]
    weights: Mapping[str, int]
    capacity: int
    resource: ResourceName
    samples: list[tuple[int, dict[str, int], dict[str, int]]] = field(default_factory=list)
    sim: Any = None

    def bind(self, sim: Any) -> FairnessProbe:
        self.sim = sim
        return self

    def __call__(self, t_us: int, _decisions: list) -> None:
        sim = self.sim
        usage: dict[str, int] = {}
        demand: dict[str, int] = {}
        for q in self.queues:
            u = sum(v for fr, v in sim.cluster.usage(q).items() if fr.resource == self.resource)
            usage[q], demand[q] = u, u + sim.pending_demand(q, self.resource)
        if self.samples and self.samples[-1][0] == t_us:
            self.samples[-1] = (t_us, usage, demand)
        else:
            self.samples.append((t_us, usage, demand))

    def report(self, end_us: int) -> dict[str, dict[str, float]]:
        """Per queue: ``share_pct`` / ``fair_share_pct`` time-averaged over contended time,
        ``diff_points``, and the same over the whole run (``*_all``)."""
        acc = {q: [0.0, 0.0, 0.0, 0.0] for q in self.queues}
        contended = total = 0
        for i, (t, usage, demand) in enumerate(self.samples):
            nxt = self.samples[i + 1][0] if i + 1 < len(self.samples) else end_us
            dt = nxt - t
            if dt <= 0:
                continue
            fair = fair_allocation(self.capacity, demand, self.weights)
            hot = sum(demand.values()) > self.capacity
            total += dt
            contended += dt if hot else 0
            for q in self.queues:
                a = acc[q]
                a[2] += usage[q] * dt
                a[3] += fair[q] * dt
                if hot:
                    a[0] += usage[q] * dt
                    a[1] += fair[q] * dt
        out = {}
        for q, (u, f, ua, fa) in acc.items():
            s = 100 * u / (contended * self.capacity) if contended else 0.0
            fs = 100 * f / (contended * self.capacity) if contended else 0.0
            sa = 100 * ua / (total * self.capacity) if total else 0.0
            fsa = 100 * fa / (total * self.capacity) if total else 0.0
            out[str(q)] = {
                "weight": self.weights[q] / 1000,
                "share_pct": round(s, 1), "fair_share_pct": round(fs, 1),
                "diff_points": round(s - fs, 1),
                "share_pct_all": round(sa, 1), "fair_share_pct_all": round(fsa, 1),
            }
        out["_contended_s"] = {"seconds": round(contended / 1e6, 1),
                               "of_run_s": round(total / 1e6, 1)}
        return out


@dataclass
class TreeFairness:
    """``FairnessProbe``s for every cohort tree of a simulation, one per (root cohort,
    resource name), built at the first cycle from the core's tree (capacity: the root's
    subtree quota summed over flavors; weights: each ClusterQueue's ``fairSharing.weight``).
    Use as ``on_cycle`` after ``bind(sim)``; ``report(end_us)`` is keyed
    ``"<root>/<resource>"``."""

    sim: Any = None
    probes: dict[str, FairnessProbe] = field(default_factory=dict)
    built: bool = False

    def bind(self, sim: Any) -> TreeFairness:
        self.sim = sim
        return self

    def _build(self) -> None:
        c = self.sim.cluster
        tree = c.tree
        for root in tree.cohort_names():
            if tree.cohort_parent(root) is not None:
                continue
            members = tree.members(root)
            caps: dict[str, int] = {}
            for fr in tree.cohort_keys(root):
                caps[fr.resource] = caps.get(fr.resource, 0) + tree.cohort_capacity(root, fr)
            weights = {q: spec.fair_weight_milli for q in members
                       if (spec := c.cluster_queue_spec(q)) is not None}
            for res, cap in caps.items():
                if cap > 0 and len(members) > 1:
                    self.probes[f"{root}/{res}"] = FairnessProbe(
                        members, weights, cap, ResourceName(res)).bind(self.sim)

    def __call__(self, t_us: int, decisions: list) -> None:
        if not self.built:
            self.built = True
            self._build()
        for p in self.probes.values():
            p(t_us, decisions)

    def report(self, end_us: int) -> dict[str, dict[str, dict[str, float]]]:
        return {k: p.report(end_us) for k, p in self.probes.items()}


def plot_shares(fairness: TreeFairness, path: str, end_us: int, *, points: int = 400) -> None:
    """Draw, per cohort tree and resource, each queue's share (solid) and weighted fair
    share (dashed) of the tree's capacity over time into ``path`` (PNG). Needs matplotlib
    (``pip install 'pykueue[plot]'``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from app.core.quantity import US
    from app.sim.report import bucket_means

    probes = list(fairness.probes.items())
    fig, axes = plt.subplots(max(1, len(probes)), 1, sharex=True,
                             figsize=(11, 3.5 * max(1, len(probes))), squeeze=False)
    end = max(end_us, 1)
    xs = [(i + 0.5) * end / points / US for i in range(points)]
    for ax, (label, p) in zip(axes[:, 0], probes, strict=False):
        ts = [t for t, _, _ in p.samples]
        fair = [fair_allocation(p.capacity, d, p.weights) for _, _, d in p.samples]
        for q in p.queues:
            share = [100 * u[q] / p.capacity for _, u, _ in p.samples]
            line, = ax.plot(xs, bucket_means(ts, share, end, points), linewidth=1,
                            label=f"{q} (w {p.weights[q] / 1000:g})")
            ax.plot(xs, bucket_means(ts, [100 * f[q] / p.capacity for f in fair], end, points),
                    linestyle="--", linewidth=1, color=line.get_color())
        ax.set_ylabel(f"% of {label}")
        ax.set_title(f"{label}: share (solid) vs weighted fair share (dashed)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", ncol=3, loc="upper right")
    axes[-1, 0].set_xlabel("virtual time (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
