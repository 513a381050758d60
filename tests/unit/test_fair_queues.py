"""Fair turns per namespace in pykueue's own queues: the reconcile work queue, the client's
token bucket and the Event writer (``app.kube.workqueue.Lanes``). One tenant's flood
must not delay another team's key by the whole backlog; nothing is lost, served twice at once,
and the backoff semantics stay client-go's."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes_asyncio.client import Configuration

from app.config import Settings
from app.integrations.framework import Registry
from app.integrations.reconciler import JobReconciler
from app.kube.client import RateLimitedApiClient, TokenBucket, lane_of_path
from app.kube.events import EventRecorder
from app.kube.workqueue import (
    FairMap,
    Lanes,
    WorkQueue,
    acting_for,
    acting_lane,
    background,
    in_background,
    namespace_of,
    work,
)


def run(coro):
    return asyncio.run(coro)


# ---------------------------------------------------------------- lanes and keys

@pytest.mark.parametrize(("key", "ns"), [
    ("job:team-a/train", "team-a"), ("team-b/wl-1", "team-b"), ("wl:x/y", "x"),
    ("pytorchjob:ns/name", "ns"), ("cq-a", ""), ("", ""),
])
def test_namespace_of_reads_the_key(key, ns) -> None:
    assert namespace_of(key) == ns


@pytest.mark.parametrize(("path", "lane"), [
    ("/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads/w/status", "team-a"),
    ("/apis/batch/v1/namespaces/team-b/jobs", "team-b"),
    ("/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq/status", ""),
    ("/apis/batch/v1/jobs", ""),
])
def test_lane_of_path_is_the_request_namespace(path, lane) -> None:
    assert lane_of_path(path) == lane


def test_one_lane_is_a_fifo_and_a_new_lane_joins_at_the_back() -> None:
    q: Lanes[str] = Lanes()
    for i in range(3):
        q.push("a", f"a{i}")
    q.push("b", "b0")
    assert [q.pop() for _ in range(4)] == ["a0", "b0", "a1", "a2"]
    with pytest.raises(IndexError):
        q.pop()


def test_drop_oldest_of_longest_costs_the_lane_that_filled_the_buffer() -> None:
    q: Lanes[str] = Lanes()
    for i in range(3):
        q.push("a", f"a{i}")
    q.push("b", "b0")
    assert q.drop_oldest_of_longest() == ("a", "a0")
    assert q.lane_sizes() == {"a": 2, "b": 1}
    assert sorted(q.pop() for _ in range(3)) == ["a1", "a2", "b0"]


# ---------------------------------------------------------------- the work queue

@settings(max_examples=200, deadline=None)
@given(flood=st.integers(1, 400), other_at=st.integers(0, 400), tenants=st.integers(1, 5))
def test_another_namespace_is_served_within_a_bounded_number_of_gets(flood, other_at,
                                                                    tenants) -> None:
    """``flood`` keys of team-a (and some of ``tenants - 1`` other flooding namespaces) are
    queued, team-b's one key arrives after ``other_at`` gets: it is served within as many
    gets as there are namespaces with keys, however long the backlog."""
    async def go() -> int:
        q = WorkQueue()
        for i in range(flood):
            for t in range(tenants):
                q.add(f"job:flood-{t}/j{i}")
        served = 0
        for _ in range(min(other_at, flood * tenants - 1)):
            q.done(await q.get())
            served += 1
        q.add("job:team-b/probe")
        n = 0
        while True:
            key = await q.get()
            q.done(key)
            n += 1
            if key == "job:team-b/probe":
                return n
    assert run(go()) <= tenants + 1


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["add", "lane", "get", "done", "fail", "forget"]),
                              st.integers(0, 3), st.integers(0, 5)), max_size=120))
def test_no_key_is_lost_or_served_twice_at_once(ops) -> None:
    """Random adds (some for another lane), gets, dones, failures (``add_rate_limited``)
    and forgets over keys of four namespaces: a key is never handed to two workers at once,
    never queued twice, its queued lane is known, and every key added is served
    after its last add (the queue drains to nothing outstanding)."""
    async def go() -> None:
        q = WorkQueue(base=0.0001, cap=0.001)
        processing: set[str] = set()
        pending: set[str] = set()  # added and not served since
        for op, ns, name in ops:
            key = f"job:ns{ns}/j{name}"
            if op in ("add", "lane"):
                q.add(key, lane=f"ns{name % 4}" if op == "lane" else None)
                pending.add(key)
            elif op == "forget":
                q.forget(key)
            elif op == "get" and len(q):
                got = await q.get()
                assert got not in processing
                processing.add(got)
                pending.discard(got)
            elif op in ("done", "fail") and processing:
                got = sorted(processing)[name % len(processing)]
                if op == "fail":
                    q.add_rate_limited(got)
                    pending.add(got)
                processing.discard(got)
                q.done(got)
            counts = Counter(k for lane in q._queue._lanes.values() for k in lane)
            assert all(c == 1 for c in counts.values())
            assert not set(counts) & processing
            assert all(k in q._queue._lanes[q._queued_in[k]] for k in counts)
        for got in sorted(processing):
            q.done(got)
        served: set[str] = set()
        for _ in range(200):
            if not pending - served:
                break
            if not len(q):
                await asyncio.sleep(0.002)  # the rate-limited adds fire
                continue
            got = await q.get()
            served.add(got)
            q.done(got)
        assert pending <= served
        q.close()
    run(go())


def test_backoff_doubles_per_failure_up_to_the_cap_and_forget_resets_it() -> None:
    async def go() -> None:
        q = WorkQueue(base=0.05, cap=0.3)
        delays = [q.add_rate_limited("job:a/x") for _ in range(5)]
        assert delays == pytest.approx([0.05, 0.1, 0.2, 0.3, 0.3])
        assert q.failures("job:a/x") == 5
        q.forget("job:a/x")
        assert q.failures("job:a/x") == 0
        assert q.add_rate_limited("job:a/x") == pytest.approx(0.05)
        assert len(q) == 0  # delayed, not queued yet
        await asyncio.sleep(0.08)
        assert q.get_nowait() == "job:a/x"
        q.close()
    run(go())


def test_a_key_added_while_processed_is_queued_again_once_done() -> None:
    async def go() -> None:
        q = WorkQueue()
        q.add("job:a/x")
        key = await q.get()
        q.add(key)
        q.add(key)
        assert len(q) == 0
        q.done(key)
        assert len(q) == 1 and q.get_nowait() == key
    run(go())


# ---------------------------------------------------------------- work for another lane

def test_lanes_remove_takes_one_item_out_of_its_lane() -> None:
    q: Lanes[str] = Lanes()
    q.push("a", "a0")
    q.push("b", "b0")
    q.push("a", "a1")
    assert not q.remove("b", "a0") and not q.remove("c", "a0")
    assert q.remove("b", "b0") and q.lane_sizes() == {"a": 2}
    assert [q.pop(), q.pop(), len(q)] == ["a0", "a1", 0]


def _drain(q: WorkQueue, until: str) -> int:
    """Gets (each done at once) until ``until`` is served; their number."""
    n = 0
    while True:
        key = q.get_nowait()
        assert key is not None
        q.done(key)
        n += 1
        if key == until:
            return n


def test_a_key_added_for_another_lane_moves_there_and_stays_until_forgotten() -> None:
    """A preemption victim's key, queued behind its own namespace's flood, is served in the
    preemptor namespace's turn; re-adds (its pods' events, a poll) keep that lane until the
    key is forgotten (its quota released)."""
    async def go() -> None:
        q = WorkQueue()
        for i in range(500):
            q.add(f"job:team-a/flood-{i}")
        q.add("job:team-a/victim")
        q.add("job:team-a/victim", lane="team-b")
        assert q.lane_sizes() == {"team-a": 500, "team-b": 1}
        assert q.lane_for("job:team-a/victim") == "team-b"
        assert _drain(q, "job:team-a/victim") <= 2
        q.add("job:team-a/victim")  # an event of it: still in team-b's turns
        assert q.lane_sizes()["team-b"] == 1 and _drain(q, "job:team-a/victim") <= 2
        q.add_after("job:team-a/victim", 0.01)
        await asyncio.sleep(0.03)
        assert q.lane_sizes()["team-b"] == 1
        assert q.acting_lane_of("job:team-a/victim") == "team-b"
        q.forget("job:team-a/victim")  # released: its own lane again
        assert q.acting_lane_of("job:team-a/victim") is None
        assert q.lane_for("job:team-a/victim") == "team-a"
        _drain(q, "job:team-a/victim")
        q.add("job:team-a/victim")
        assert "team-b" not in q.lane_sizes()
        q.close()
    run(go())


def test_a_key_added_for_its_own_lane_or_added_while_processed_keeps_its_place() -> None:
    q = WorkQueue()
    q.add("job:team-a/x")
    q.add("job:team-a/y", lane="team-a")
    assert q.acting_lane_of("job:team-a/y") is None
    key = q.get_nowait()
    q.add(key, lane="team-b")  # processing: queued in team-b's lane once done
    assert q.lane_sizes() == {"team-a": 1}
    q.done(key)
    assert q.lane_sizes() == {"team-a": 1, "team-b": 1}


def test_a_key_served_for_another_lane_is_reconciled_acting_for_it() -> None:
    async def go() -> list[tuple[str, str | None]]:
        q = WorkQueue()
        seen: list[tuple[str, str | None]] = []

        async def reconcile(key: str) -> None:
            seen.append((key, acting_lane()))
            if len(seen) == 2:
                raise asyncio.CancelledError
        q.add("job:team-a/x")
        q.add("job:team-a/victim", lane="team-b")
        with pytest.raises(asyncio.CancelledError):
            await work(q, reconcile, may_write=lambda: True, log=logging.getLogger("t"),
                       what="reconcile")
        assert acting_lane() is None
        return seen
    assert run(go()) == [("job:team-a/x", None), ("job:team-a/victim", "team-b")]


def test_the_job_framework_told_acting_for_a_lane_serves_the_owner_there() -> None:
    """``JobReconciler.notify`` from a preemption's eviction (acting for the preemptor's
    namespace) queues the victim's owner in that namespace's turns; otherwise in its own."""
    jobs = JobReconciler(SimpleNamespace(settings=Settings(controllers_enabled=False)),
                         Registry())  # type: ignore[arg-type]
    jobs.notify(None, "team-a/other")
    with acting_for("team-b"):
        jobs.notify(None, "team-a/victim")
    assert jobs.queue.lane_sizes() == {"team-a": 1, "team-b": 1}
    assert jobs.queue.lane_for("wl:team-a/victim") == "team-b"


def test_requests_made_acting_for_a_lane_take_their_tokens_in_it() -> None:
    """The API client's token lane: the request path's namespace, unless the request is
    made for another namespace (a victim's eviction, written for its preemptor)."""
    class Recording(TokenBucket):
        lanes: list[str] = []

        async def acquire(self, lane: str = "", *, background: bool = False) -> None:
            self.lanes.append(lane + ("(bg)" if background else ""))

    async def go() -> list[str]:
        bucket = Recording(50, 100)
        api = RateLimitedApiClient(Configuration(host="https://127.0.0.1:1"), bucket, 5.0)
        try:
            await api._token("team-a")
            with acting_for("team-b"):
                await api._token("team-a")
                await asyncio.create_task(api._token(""))  # a task made inside: team-b too
            await api._token("team-a")
            with background():
                await asyncio.create_task(api._token("team-c"))
            await api._token("team-c")
        finally:
            await api.close()
        return bucket.lanes
    assert run(go()) == ["team-a", "team-b", "team-b", "team-a", "team-c(bg)", "team-c"]


# ---------------------------------------------------------------- pending messages to write

def test_pending_messages_are_taken_in_namespace_turns_with_their_latest_value() -> None:
    """The scheduling loop's pending writer (``PendingMessages._pending``): team-b's message is
    the second written however many of team-a's wait; a key set again keeps its place and
    its latest value; a key removed is skipped."""
    m: FairMap[str] = FairMap()
    for i in range(50):
        m[f"team-a/w{i}"] = "old"
    m["team-b/probe"] = "b"
    m["team-a/w0"] = "new"
    assert m.pop("team-a/w1") == "old"
    taken = [m.pop_next() for _ in range(3)]
    assert taken == [("team-a/w0", "new"), ("team-b/probe", "b"), ("team-a/w2", "old")]
    assert len(m) == 47 and "team-a/w1" not in m
    while m:
        m.pop_next()
    with pytest.raises(KeyError):
        m.pop_next()


# ---------------------------------------------------------------- the client's token bucket

def test_token_bucket_serves_waiting_lanes_in_turn() -> None:
    """With team-a's 20 requests waiting for tokens, team-b's request, arriving last, gets
    the second token handed out, not the 21st."""
    async def go() -> list[str]:
        now = [0.0]

        async def sleep(d: float) -> None:
            now[0] += d
            await asyncio.sleep(0)

        bucket = TokenBucket(qps=8, burst=1, clock=lambda: now[0], sleep=sleep)
        order: list[str] = []

        async def one(lane: str, tag: str) -> None:
            await bucket.acquire(lane)
            order.append(tag)

        assert bucket.try_acquire()
        tasks = [asyncio.create_task(one("team-a", f"a{i}")) for i in range(20)]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(one("team-b", "b")))
        await asyncio.gather(*tasks)
        assert now[0] == pytest.approx(21 / 8)  # the rate is unchanged
        return order
    order = run(go())
    assert order.index("b") <= 1
    assert [t for t in order if t != "b"] == [f"a{i}" for i in range(20)]


def _bucket_run(max_wait: float, script):
    """Run ``script(bucket, one)`` on a TokenBucket(qps=8, burst=1) with a fake clock whose
    sleeps advance it; ``one(lane, tag, background)`` records ``(tag, time)`` when granted."""
    async def go() -> list[tuple[str, float]]:
        now = [0.0]

        async def sleep(d: float) -> None:
            now[0] += d
            await asyncio.sleep(0)

        bucket = TokenBucket(qps=8, burst=1, clock=lambda: now[0], sleep=sleep,
                             background_max_wait=max_wait)
        order: list[tuple[str, float]] = []

        async def one(lane: str, tag: str, bg: bool = False) -> None:
            await bucket.acquire(lane, background=bg)
            order.append((tag, now[0]))

        await script(bucket, one)
        return order
    return run(go())


def test_background_waiters_go_after_every_foreground_waiter() -> None:
    """Queue status and Events (background) wait behind admission writes: a background
    request queued first is granted after the 10 foreground ones queued after it."""
    async def script(bucket, one) -> None:
        assert bucket.try_acquire()
        tasks = [asyncio.create_task(one("", "status", True))]
        await asyncio.sleep(0)
        tasks += [asyncio.create_task(one(f"team-{i % 3}", f"a{i}")) for i in range(10)]
        await asyncio.gather(*tasks)
    order = _bucket_run(60.0, script)
    assert [t for t, _ in order][-1] == "status"
    assert len(order) == 11


def test_a_background_waiter_is_served_once_it_waited_the_max_wait() -> None:
    """With 40 foreground requests waiting at 8 tokens a second, a background one waits
    ``background_max_wait`` (1 s) and takes the next token, not the 41st."""
    async def script(bucket, one) -> None:
        assert bucket.try_acquire()
        tasks = [asyncio.create_task(one("", "status", True))]
        await asyncio.sleep(0)
        tasks += [asyncio.create_task(one("team-a", f"a{i}")) for i in range(40)]
        await asyncio.gather(*tasks)
    order = _bucket_run(1.0, script)
    tags = [t for t, _ in order]
    at = dict(order)["status"]
    assert 1.0 <= at <= 1.0 + 1 / 8 + 1e-9
    assert 7 <= tags.index("status") <= 9
    assert [t for t in tags if t != "status"] == [f"a{i}" for i in range(40)]
    assert order[-1][1] == pytest.approx(41 / 8)  # the rate is unchanged


def test_a_background_request_alone_is_not_held_back() -> None:
    """Nothing else waiting: a background request takes a saved token at once, and then
    waits only for the refill."""
    async def script(bucket, one) -> None:
        await one("", "first", True)
        await one("", "second", True)
    assert _bucket_run(5.0, script) == [("first", 0.0), ("second", pytest.approx(1 / 8))]


def test_a_cancelled_background_waiter_gives_its_token_to_the_next() -> None:
    async def go() -> None:
        bucket = TokenBucket(qps=50, burst=1)
        assert bucket.try_acquire()
        gone = asyncio.create_task(bucket.acquire("", background=True))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        await asyncio.wait_for(bucket.acquire("", background=True), 1.0)
        await asyncio.wait_for(bucket.acquire("team-a"), 1.0)
        assert bucket.waiting == 0
    run(go())


def test_token_bucket_refuses_a_negative_background_max_wait() -> None:
    with pytest.raises(ValueError, match="background_max_wait"):
        TokenBucket(50, 100, background_max_wait=-1)


def test_a_cancelled_waiter_gives_its_turn_and_token_to_the_next() -> None:
    async def go() -> None:
        bucket = TokenBucket(qps=50, burst=1)
        assert bucket.try_acquire()
        gone = asyncio.create_task(bucket.acquire("team-a"))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        await asyncio.wait_for(bucket.acquire("team-b"), 1.0)
        assert bucket.waiting == 0
    run(go())


# ---------------------------------------------------------------- the Event writer

def test_a_full_event_queue_drops_the_flooding_namespaces_events_not_anothers() -> None:
    async def go() -> None:
        rec = EventRecorder(None, max_pending=10)

        def job(ns: str, name: str) -> dict:
            return {"apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"namespace": ns, "name": name, "uid": f"{ns}-{name}"}}

        for i in range(30):
            rec.emit(job("team-a", f"j{i}"), "Normal", "CreatedWorkload", "m")
        assert rec.emit(job("team-b", "probe"), "Normal", "CreatedWorkload", "m")
        sizes = rec._queue.lane_sizes()
        assert sizes["team-b"] == 1 and sizes["team-a"] == 9
        assert rec.dropped == 21
        first_two = [rec._queue.pop()["metadata"]["namespace"] for _ in range(2)]
        assert "team-b" in first_two
    run(go())


# ---------------------------------------------------------------- background writers

def test_events_are_written_as_background_traffic() -> None:
    """The Event writer's requests take their tokens after the admission writes
    (``background``)."""
    class Client:
        def __init__(self) -> None:
            self.seen: list[bool] = []

        async def create(self, res, obj) -> dict:
            self.seen.append(in_background())
            return obj

    async def go() -> list[bool]:
        client = Client()
        rec = EventRecorder(client)  # type: ignore[arg-type]
        rec.start()
        try:
            rec.emit({"apiVersion": "batch/v1", "kind": "Job",
                      "metadata": {"namespace": "ns", "name": "j", "uid": "u"}},
                     "Normal", "Started", "m")
            await asyncio.wait_for(_until(lambda: client.seen), 5.0)
        finally:
            await rec.stop()
        return client.seen
    assert run(go()) == [True]
    assert not in_background()


def test_queue_status_is_flushed_as_background_traffic() -> None:
    """``StatusWriter.run`` flushes inside ``background``: queue status waits behind the
    admission writes for a token."""
    from types import SimpleNamespace

    from app.controllers.queue_status import StatusWriter
    from app.core.scheduling_cycle import Scheduler

    async def go() -> list[bool]:
        settings = Settings()
        settings.scheduling.status_flush_seconds = 0.01
        ctx = SimpleNamespace(settings=settings, may_write=True)
        writer = StatusWriter(ctx, Scheduler())  # type: ignore[arg-type]
        seen: list[bool] = []

        async def flush() -> int:
            seen.append(in_background())
            return 0
        writer.flush = flush  # type: ignore[method-assign]
        writer.start()
        try:
            await asyncio.wait_for(_until(lambda: seen), 5.0)
        finally:
            await writer.stop()
        return seen
    assert run(go())[0] is True


async def _until(cond) -> None:
    while not cond():
        await asyncio.sleep(0.005)
