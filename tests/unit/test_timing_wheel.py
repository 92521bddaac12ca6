"""Timing wheel and sans-IO timer: checked against a plain sorted-list model."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.broker.timing.wheel import Timer, TimerTask, TimingWheel

DAY = 86_400_000

# Deadlines relative to "now": near (level 0/1), medium, and days away (many overflow levels).
delays = st.one_of(st.integers(-3, 25), st.integers(-100, 10_000), st.integers(0, 5 * DAY))
steps = st.one_of(st.integers(0, 25), st.integers(0, 5_000), st.integers(0, 6 * DAY))
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), delays),
        st.tuples(st.just("cancel"), st.integers(0, 1 << 20)),
        st.tuples(st.just("advance"), steps),
    ),
    max_size=150,
)


def deadlines(tasks: list[TimerTask]) -> list[int]:
    return [t.deadline_ms for t in tasks]


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(start=st.integers(0, 1 << 42), size=st.sampled_from([2, 3, 7, 20]), script=ops)
def test_wheel_matches_sorted_model(start: int, size: int, script: list[tuple[str, int]]) -> None:
    wheel = TimingWheel(start, size)
    now = start
    created: list[TimerTask] = []
    live: dict[int, TimerTask] = {}  # the model: id -> pending task
    for op, arg in script:
        if op == "add":
            task = TimerTask(now + arg)
            created.append(task)
            stored = wheel.add(task)
            assert stored == (task.deadline_ms > now)
            assert task.pending == stored
            if stored:
                live[id(task)] = task
        elif op == "cancel" and created:
            task = created[arg % len(created)]
            task.cancel()
            assert task.cancelled and not task.pending
            live.pop(id(task), None)
        elif op == "advance":
            now += arg
            out = wheel.advance(now)
            due = sorted((t for t in live.values() if t.deadline_ms <= now), key=lambda t: t.deadline_ms)
            assert len({id(t) for t in out}) == len(out), "a task expired twice"
            assert {id(t) for t in out} == {id(t) for t in due}
            assert deadlines(out) == sorted(deadlines(out)), "not in deadline order"
            for task in out:
                del live[id(task)]
                assert not task.pending and not task.cancelled
        assert wheel.now_ms == now
        assert len(wheel) == len(live)
        nxt = wheel.next_deadline_ms()
        if live:
            assert nxt is not None
            assert now < nxt <= min(t.deadline_ms for t in live.values())
        else:
            assert nxt is None


@settings(max_examples=200, deadline=None)
@given(
    size=st.sampled_from([2, 20]),
    items=st.lists(st.integers(1, 3 * DAY), min_size=1, max_size=60),
    extra=st.lists(st.integers(0, 3 * DAY), max_size=40),
)
@pytest.mark.slow
def test_stepping_and_jumping_expire_the_same(size: int, items: list[int], extra: list[int]) -> None:
    """Many advances (landing on and just before each deadline) and one big jump agree."""
    stepped, jumped = TimingWheel(0, size), TimingWheel(0, size)
    a = [TimerTask(d) for d in items]
    b = [TimerTask(d) for d in items]
    for x, y in zip(a, b):
        stepped.add(x)
        jumped.add(y)
    points = sorted({*extra, *(d - 1 for d in items), *items, 3 * DAY})
    out_a: list[TimerTask] = []
    for now in points:
        got = stepped.advance(now)
        assert all(t.deadline_ms == now for t in got), "early or late"
        out_a += got
    out_b = jumped.advance(3 * DAY)
    assert deadlines(out_a) == deadlines(out_b) == sorted(items)


def test_far_deadlines_create_overflow_levels_on_demand() -> None:
    wheel = TimingWheel(1_000)
    assert wheel.levels == 1
    near = TimerTask(1_019)
    wheel.add(near)
    assert wheel.levels == 1
    far = TimerTask(1_000 + 3 * DAY)
    wheel.add(far)
    assert wheel.levels == 7  # 20**6 ms per bucket on level 6, about 15 days per turn
    assert wheel.advance(1_019) == [near]
    # Walk towards the far deadline in uneven strides; it must not fire early.
    now = 1_019
    while now < far.deadline_ms - 1:
        now = min(now + 7_777_777, far.deadline_ms - 1)
        assert wheel.advance(now) == []
        assert wheel.next_deadline_ms() is not None
        assert wheel.next_deadline_ms() <= far.deadline_ms  # type: ignore[operator]
    assert len(wheel) == 1
    assert wheel.advance(far.deadline_ms) == [far]
    assert len(wheel) == 0 and wheel.next_deadline_ms() is None


def test_exact_deadline_boundaries() -> None:
    wheel = TimingWheel(0)
    tasks = [TimerTask(d) for d in (1, 19, 20, 21, 399, 400, 401, 8_000)]
    for t in tasks:
        assert wheel.add(t)
    for t in tasks:
        assert wheel.advance(t.deadline_ms - 1) == []
        assert wheel.advance(t.deadline_ms) == [t]


def test_add_refuses_due_and_reused_tasks() -> None:
    wheel = TimingWheel(100)
    assert wheel.add(TimerTask(100)) is False  # due now: the caller decides
    assert wheel.add(TimerTask(5)) is False
    assert len(wheel) == 0
    task = TimerTask(150)
    assert wheel.add(task)
    with pytest.raises(ValueError):
        wheel.add(task)  # already pending
    task.cancel()
    with pytest.raises(ValueError):
        wheel.add(task)  # cancelled for good
    again = TimerTask(120)
    wheel.add(again)
    assert wheel.advance(120) == [again]
    again.deadline_ms = 130  # an expired task may be rescheduled
    assert wheel.add(again)
    assert wheel.advance(200) == [again]


def test_cancel_unlinks_from_bucket_in_place() -> None:
    wheel = TimingWheel(0)
    a, b, c, d = (TimerTask(7) for _ in range(4))
    for t in (a, b, c, d):
        wheel.add(t)
    bucket = a._bucket
    assert bucket is not None and all(t._bucket is bucket for t in (b, c, d))
    assert bucket.tasks() == [a, b, c, d] and bucket.count == 4
    b.cancel()
    assert bucket.tasks() == [a, c, d] and bucket.count == 3
    assert a._next is c and c._prev is a  # neighbours joined directly
    assert b._prev is None and b._next is None  # no dangling references
    a.cancel()  # head
    d.cancel()  # tail
    assert bucket.tasks() == [c] and bucket._next is c and bucket._prev is c
    b.cancel()  # idempotent
    assert bucket.count == 1 and len(wheel) == 1
    c.cancel()
    assert bucket.tasks() == [] and len(wheel) == 0
    assert wheel.next_deadline_ms() is None  # emptied buckets do not wake the driver
    assert wheel.advance(100) == []


def test_cancel_cost_does_not_grow_with_bucket_size() -> None:
    """50k tasks in one bucket, cancelled from the tail: quadratic search would take minutes."""
    wheel = TimingWheel(0)
    tasks = [TimerTask(5) for _ in range(50_000)]
    for t in tasks:
        wheel.add(t)
    started = time.perf_counter()
    for t in reversed(tasks):
        t.cancel()
    assert time.perf_counter() - started < 2.0
    assert len(wheel) == 0


def test_tasks_are_slotted() -> None:
    task = TimerTask(1)
    assert not hasattr(task, "__dict__")
    assert not hasattr(TimingWheel(0), "__dict__")


def test_next_deadline_is_bucket_granular_but_never_late() -> None:
    wheel = TimingWheel(0)
    task = TimerTask(12_345)
    wheel.add(task)
    first = wheel.next_deadline_ms()
    assert first is not None and 0 < first <= 12_345
    now = 0
    while True:
        nxt = wheel.next_deadline_ms()
        assert nxt is not None and nxt > now
        now = nxt
        out = wheel.advance(now)
        if out:
            assert out == [task] and now == 12_345
            break
    assert wheel.next_deadline_ms() is None


# ---- Timer: the policy of running tasks ----


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(start=st.integers(0, 1 << 40), script=ops)
def test_timer_runs_each_task_once_never_early(start: int, script: list[tuple[str, int]]) -> None:
    timer = Timer(start, wheel_size=3)
    clock = [start]  # read by the callbacks when they run
    created: list[TimerTask] = []
    runs: list[tuple[TimerTask, int]] = []
    live: dict[int, TimerTask] = {}
    for op, arg in script:
        if op == "add":
            task = TimerTask(clock[0] + arg)
            task.callback = lambda task=task: runs.append((task, clock[0]))
            created.append(task)
            timer.add(task)  # due tasks wait for the next advance_to
            live[id(task)] = task
        elif op == "cancel" and created:
            task = created[arg % len(created)]
            task.cancel()
            live.pop(id(task), None)
        elif op == "advance":
            clock[0] += arg
            now = clock[0]
            before = len(runs)
            ran = timer.advance_to(now)
            batch = runs[before:]
            assert ran == len(batch)
            due = {id(t) for t in live.values() if t.deadline_ms <= now}
            assert {id(t) for t, _ in batch} == due and len(batch) == len(due)
            assert deadlines([t for t, _ in batch]) == sorted(deadlines([t for t, _ in batch]))
            for task, _ in batch:
                del live[id(task)]
        assert len(timer) == len(live)
    assert all(at >= task.deadline_ms for task, at in runs)


def test_timer_defers_due_tasks_to_advance() -> None:
    timer = Timer(50)
    seen: list[str] = []
    timer.add(TimerTask(10, lambda: seen.append("late")))
    assert seen == [] and len(timer) == 1
    assert timer.next_deadline_ms() == 50
    assert timer.advance_to(50) == 1
    assert seen == ["late"]


def test_timer_batch_mutations() -> None:
    timer = Timer(0)
    seen: list[str] = []
    victim = TimerTask(5, lambda: seen.append("victim"))
    periodic = TimerTask(5)

    def tick() -> None:
        seen.append(f"periodic@{periodic.deadline_ms}")
        if periodic.deadline_ms < 25:
            periodic.deadline_ms += 10
            timer.add(periodic)

    periodic.callback = tick

    def first() -> None:
        seen.append("first")
        victim.cancel()  # expired in the same batch, but must not run
        timer.add(TimerTask(0, lambda: seen.append("spawned")))  # already due: runs this call

    timer.add(TimerTask(4, first))
    timer.add(victim)
    timer.add(periodic)
    assert timer.advance_to(100) == 5
    assert seen == ["first", "periodic@5", "spawned", "periodic@15", "periodic@25"]
    assert len(timer) == 0


def test_timer_reports_failures_after_running_the_rest() -> None:
    timer = Timer(0)
    seen: list[int] = []

    def boom() -> None:
        raise RuntimeError("boom")

    timer.add(TimerTask(1, boom))
    timer.add(TimerTask(2, lambda: seen.append(2)))
    with pytest.raises(RuntimeError, match="boom"):
        timer.advance_to(10)
    assert seen == [2]
    timer.add(TimerTask(11, boom))
    timer.add(TimerTask(12, boom))
    with pytest.raises(ExceptionGroup):
        timer.advance_to(20)
    assert timer.advance_to(30) == 0


def test_timer_interrupted_batch_keeps_the_rest() -> None:
    timer = Timer(0)
    seen: list[int] = []

    def stop() -> None:
        raise KeyboardInterrupt

    timer.add(TimerTask(1, stop))
    timer.add(TimerTask(2, lambda: seen.append(2)))
    with pytest.raises(KeyboardInterrupt):
        timer.advance_to(5)
    assert seen == [] and len(timer) == 1
    assert timer.advance_to(5) == 1 and seen == [2]
