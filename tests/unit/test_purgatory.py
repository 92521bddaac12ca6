"""Purgatory semantics (sans-IO, on broker.timing_wheel.Timer) and the asyncio timer driver."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.broker.timing.purgatory import DelayedOperation, Purgatory
from shoal.broker.timing.timer import AsyncTimer
from shoal.broker.timing.wheel import Timer, TimerTask


class Op(DelayedOperation):
    """Completes when ``ready`` is set; records every callback."""

    def __init__(self, timeout_ms: int, name: str = "", log: list[str] | None = None) -> None:
        super().__init__(timeout_ms)
        self.name = name
        self.ready = False
        self.completions = 0
        self.expirations = 0
        self.tries = 0
        self.log = log if log is not None else []
        self.on_complete_hook: Callable[[], None] | None = None
        self.on_expiration_hook: Callable[[], None] | None = None

    def try_complete(self) -> bool:
        self.tries += 1
        if self.ready:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.completions += 1
        self.log.append(f"complete {self.name}")
        if self.on_complete_hook is not None:
            self.on_complete_hook()

    def on_expiration(self) -> None:
        self.expirations += 1
        self.log.append(f"expire {self.name}")
        if self.on_expiration_hook is not None:
            self.on_expiration_hook()


def make(start: int = 0, purge_interval: int = 1000) -> tuple[Timer, Purgatory]:
    timer = Timer(start)
    return timer, Purgatory("test", timer, purge_interval=purge_interval)


def test_completes_on_first_try_without_watching() -> None:
    timer, purgatory = make()
    op = Op(100)
    op.ready = True
    assert purgatory.try_complete_else_watch(op, [("fetch", "t", 0)]) is True
    assert op.completions == 1 and op.is_completed
    assert purgatory.watched(("fetch", "t", 0)) == 0
    assert purgatory.delayed() == 0 and len(timer) == 0


def test_completion_by_key() -> None:
    timer, purgatory = make(start=1_000)
    key = ("fetch", "topic", 3)
    op = Op(500)
    assert purgatory.try_complete_else_watch(op, [key]) is False
    assert op.deadline_ms == 1_500
    assert purgatory.watched(key) == 1 and purgatory.delayed() == 1 and len(timer) == 1
    assert purgatory.check_and_complete(key) == 0  # not ready: stays
    assert purgatory.watched(key) == 1 and op.tries == 2
    op.ready = True
    assert purgatory.check_and_complete(key) == 1
    assert op.completions == 1 and op.expirations == 0
    assert purgatory.watched(key) == 0 and purgatory.keys() == 0
    assert purgatory.delayed() == 0 and len(timer) == 0  # its timer entry is gone
    assert purgatory.expire(10_000) == 0
    assert op.completions == 1 and op.expirations == 0
    assert purgatory.check_and_complete(("other",)) == 0


def test_a_check_that_raises_completes_its_operation_and_spares_the_caller(caplog) -> None:
    """A waiter whose check raises (inside another request's produce or acknowledgement write)
    is answered at once, the others under the key still get their try, and the caller sees no
    exception. Before, the exception escaped into the caller (a share partition's write task
    died with acknowledgements unanswered) and the waiter hung until its deadline."""
    _, purgatory = make()
    bad, good = Op(60_000, "bad"), Op(60_000, "good")
    purgatory.try_complete_else_watch(bad, ["k"])
    purgatory.try_complete_else_watch(good, ["k"])

    def boom() -> bool:
        raise AssertionError("share partition gone")

    bad.try_complete = boom  # type: ignore[method-assign]
    good.ready = True
    with caplog.at_level("ERROR", logger="shoal.purgatory"):
        assert purgatory.check_and_complete("k") == 2
    assert bad.completions == 1 and good.completions == 1 and purgatory.delayed() == 0
    assert "share partition gone" in caplog.text
    fresh = Op(60_000, "fresh")
    fresh.try_complete = boom  # type: ignore[method-assign]
    assert purgatory.try_complete_else_watch(fresh, ["k"]) is True and fresh.completions == 1


def test_completion_by_expiry() -> None:
    log: list[str] = []
    _, purgatory = make(start=0)
    op = Op(100, "a", log)
    purgatory.try_complete_else_watch(op, ["k"])
    assert purgatory.expire(99) == 0 and not op.is_completed
    assert purgatory.expire(100) == 1
    assert log == ["complete a", "expire a"]  # force-completed, then on_expiration
    assert purgatory.delayed() == 0
    # The key still lists it until checked or purged; a check neither retries nor counts it.
    assert purgatory.watched("k") == 1 and purgatory.stale() == 1
    tries = op.tries
    assert purgatory.check_and_complete("k") == 0 and op.tries == tries
    assert purgatory.watched("k") == 0 and purgatory.stale() == 0


def test_zero_timeout_expires_on_next_expire_not_inside_watch() -> None:
    _, purgatory = make(start=10)
    op = Op(0)
    assert purgatory.try_complete_else_watch(op, ["k"]) is False
    assert not op.is_completed
    assert purgatory.expire(10) == 1 and op.expirations == 1


def test_two_keys_and_timer_complete_once() -> None:
    _, purgatory = make()
    op = Op(50)
    purgatory.try_complete_else_watch(op, ["k1", "k2"])
    op.ready = True
    assert purgatory.check_and_complete("k1") == 1
    assert purgatory.check_and_complete("k2") == 0
    assert purgatory.expire(1_000) == 0
    assert op.force_complete() is False
    assert (op.completions, op.expirations) == (1, 0)


def test_race_inside_callbacks_still_completes_once() -> None:
    """While completing via k1, callbacks fire k2, the timer and force_complete: nothing repeats."""
    timer, purgatory = make()
    op = Op(50)
    purgatory.try_complete_else_watch(op, ["k1", "k2"])

    def storm() -> None:
        assert purgatory.check_and_complete("k2") == 0
        assert purgatory.check_and_complete("k1") == 0
        assert purgatory.expire(10_000) == 0
        assert op.force_complete() is False

    op.on_complete_hook = storm
    op.ready = True
    assert purgatory.check_and_complete("k1") == 1
    assert (op.completions, op.expirations) == (1, 0)
    assert purgatory.delayed() == 0 and len(timer) == 0


def test_expiry_racing_a_key_check_in_on_expiration() -> None:
    _, purgatory = make()
    a, b = Op(10, "a"), Op(10, "b")
    purgatory.try_complete_else_watch(a, ["k"])
    purgatory.try_complete_else_watch(b, ["k"])

    def check() -> None:
        a.ready = b.ready = True
        purgatory.check_and_complete("k")  # b may complete here, a is done already

    a.on_expiration_hook = check
    purgatory.expire(10)
    assert (a.completions, a.expirations) == (1, 1)
    assert b.completions == 1 and b.expirations == 0  # completed by the key before its turn
    assert purgatory.delayed() == 0 and purgatory.watched("k") == 0


def test_callbacks_may_watch_new_operations_under_the_key_being_checked() -> None:
    _, purgatory = make()
    first = Op(100, "first")
    purgatory.try_complete_else_watch(first, ["k"])
    follow = Op(100, "follow")
    first.on_complete_hook = lambda: purgatory.try_complete_else_watch(follow, ["k"])
    first.ready = True
    assert purgatory.check_and_complete("k") == 1
    assert purgatory.watched("k") == 1 and purgatory.delayed() == 1
    follow.ready = True
    assert purgatory.check_and_complete("k") == 1
    assert purgatory.watched("k") == 0


def test_operation_watched_under_many_keys() -> None:
    _, purgatory = make(purge_interval=100)
    keys = [("share", "g", "t", p) for p in range(300)]
    op = Op(1_000)
    purgatory.try_complete_else_watch(op, keys + keys[:10])  # duplicates are watched once
    assert all(purgatory.watched(k) == 1 for k in keys)
    assert purgatory.keys() == 300
    op.ready = True
    assert purgatory.check_and_complete(keys[123]) == 1
    # 299 stale entries exceed purge_interval: the purge ran and dropped every list.
    assert purgatory.keys() == 0 and purgatory.stale() == 0
    assert op.completions == 1


def test_purge_keeps_watch_lists_bounded() -> None:
    purge_interval = 20
    _, purgatory = make(purge_interval=purge_interval)
    longest = 0
    ops: list[Op] = []
    for i in range(2_000):
        op = Op(60_000)
        ops.append(op)
        purgatory.try_complete_else_watch(op, ["hot", "cold", ("member", i % 7)])
        if i % 2:
            op.ready = True
            purgatory.check_and_complete("hot")  # leaves stale entries under "cold" and the member
        else:
            op.force_complete()  # completed from outside: stale everywhere
        longest = max(longest, purgatory.watched("cold"), purgatory.watched(("member", 0)))
        assert purgatory.stale() <= purge_interval
    assert longest <= purge_interval + 1
    assert purgatory.delayed() == 0
    assert all(op.completions == 1 for op in ops)


def test_watched_operation_cannot_be_watched_twice() -> None:
    _, purgatory = make()
    op = Op(100)
    purgatory.try_complete_else_watch(op, ["k"])
    with pytest.raises(ValueError):
        purgatory.try_complete_else_watch(op, ["j"])
    other = Purgatory("other", Timer(0))
    with pytest.raises(ValueError):
        other.try_complete_else_watch(op, ["k"])


def test_shutdown_drops_pending_operations() -> None:
    timer, purgatory = make()
    keyed, keyless = Op(10), Op(10)
    purgatory.try_complete_else_watch(keyed, ["k"])
    purgatory.try_complete_else_watch(keyless, [])
    purgatory.shutdown()
    assert purgatory.delayed() == 0 and purgatory.keys() == 0
    timer.advance_to(1_000)
    assert keyed.completions == keyless.completions == 0
    assert keyed.expirations == keyless.expirations == 0
    assert keyless.force_complete() is True  # still possible by hand; the books stay at zero
    assert purgatory.delayed() == 0
    with pytest.raises(RuntimeError):
        purgatory.try_complete_else_watch(Op(10), ["k"])


def test_purgatories_share_a_timer() -> None:
    timer = Timer(0)
    fetches, joins = Purgatory("Fetch", timer), Purgatory("Join", timer)
    f, j = Op(5), Op(7)
    fetches.try_complete_else_watch(f, ["p"])
    joins.try_complete_else_watch(j, ["g"])
    assert len(timer) == 2
    assert joins.expire(7) == 1  # advances the shared timer: the fetch expires too
    assert f.expirations == 1 and j.expirations == 1
    assert fetches.delayed() == 0


# A random mix of watches, events, outside completions and time: the invariants must hold.
actions = st.lists(
    st.one_of(
        st.tuples(st.just("watch"), st.integers(0, 200), st.sets(st.integers(0, 5), max_size=4)),
        st.tuples(st.just("ready"), st.integers(0, 1 << 16), st.none()),
        st.tuples(st.just("check"), st.integers(0, 5), st.none()),
        st.tuples(st.just("force"), st.integers(0, 1 << 16), st.none()),
        st.tuples(st.just("time"), st.integers(0, 120), st.none()),
    ),
    max_size=120,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(script=actions, purge_interval=st.integers(0, 8))
def test_purgatory_invariants(script: list[tuple[str, int, object]], purge_interval: int) -> None:
    timer, purgatory = make(start=0, purge_interval=purge_interval)
    now = 0
    ops: list[tuple[Op, frozenset[Hashable]]] = []
    completed_at: dict[int, int] = {}

    def stamp(op: Op) -> Callable[[], None]:
        return lambda: completed_at.setdefault(id(op), now)

    for kind, n, keys in script:
        if kind == "watch":
            op = Op(n)
            op.on_complete_hook = stamp(op)
            assert isinstance(keys, set)
            done = purgatory.try_complete_else_watch(op, sorted(keys))
            assert done is False
            ops.append((op, frozenset(keys)))
        elif kind == "ready" and ops:
            ops[n % len(ops)][0].ready = True
        elif kind == "check":
            purgatory.check_and_complete(n)
            # Nothing ready and watched under this key is left waiting.
            assert not any(op.ready and not op.is_completed and n in ks for op, ks in ops)
        elif kind == "force" and ops:
            ops[n % len(ops)][0].force_complete()
        elif kind == "time":
            now += n
            purgatory.expire(now)
            assert all(op.is_completed or op.deadline_ms > now for op, _ in ops), "late"
        for op, _ in ops:
            assert op.completions == (1 if op.is_completed else 0)
            assert op.expirations <= op.completions
            if op.expirations:
                assert completed_at[id(op)] >= op.deadline_ms, "early"
        assert purgatory.delayed() == sum(not op.is_completed for op, _ in ops) == len(timer)
        assert purgatory.stale() <= purge_interval
        live_entries = sum(len(ks) for op, ks in ops if not op.is_completed)
        total = sum(purgatory.watched(k) for k in range(6))
        assert live_entries <= total <= live_entries + purge_interval


# ---- the asyncio driver ----


class FakeClock:
    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


async def test_async_timer_on_fake_clock() -> None:
    clock = FakeClock(1_000)
    timer = AsyncTimer(asyncio.get_running_loop(), clock)
    seen: list[int] = []
    for d in (1_050, 1_010, 1_000 + 86_400_000, 1_020):
        timer.add(TimerTask(d, lambda d=d: seen.append(d)))
    assert timer._armed_ms == 1_010  # one handle, for the earliest bucket
    assert timer.advance_to(1_009) == 0
    clock.now = 1_030
    assert timer.advance_to() == 2 and seen == [1_010, 1_020]
    armed = timer._armed_ms
    assert armed is not None and 1_030 < armed <= 1_050  # bucket-granular, never late
    timer.add(TimerTask(1_035, lambda: seen.append(1_035)))
    assert timer._armed_ms == 1_035  # re-armed earlier
    assert timer.advance_to(1_060) == 2 and seen[2:] == [1_035, 1_050]
    assert len(timer) == 1
    timer.close()
    assert timer._handle is None
    with pytest.raises(RuntimeError):
        timer.add(TimerTask(0))


async def test_idle_async_timer_files_new_tasks_from_the_present() -> None:
    clock = FakeClock(0)
    timer = AsyncTimer(asyncio.get_running_loop(), clock)
    clock.now = 10_000_000  # long idle: the wheel's clock still says 0
    timer.add(TimerTask(clock.now + 5))
    assert timer.wheel.now_ms == 10_000_000
    assert timer._armed_ms == 10_000_005  # not the start of some coarse, stale bucket
    timer.close()


async def test_async_timer_handle_fires_on_fake_clock() -> None:
    """The loop callback advances to the injected clock's time, whatever the loop's time says."""
    clock = FakeClock(0)
    timer = AsyncTimer(asyncio.get_running_loop(), clock)
    fired = asyncio.Event()
    timer.add(TimerTask(5, fired.set))
    clock.now = 5  # fake time has passed; the handle (5 ms of loop time) will find it due
    await asyncio.wait_for(fired.wait(), 1.0)
    assert timer._handle is None and len(timer) == 0
    timer.close()


async def test_async_timer_runs_due_task_soon_and_reports_failures() -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
    try:
        timer = AsyncTimer(loop)
        done = asyncio.Event()

        def boom() -> None:
            raise ValueError("boom")

        timer.add(TimerTask(0, boom))
        timer.add(TimerTask(0, done.set))  # the failure above does not stop it
        await asyncio.wait_for(done.wait(), 1.0)
        assert len(errors) == 1 and isinstance(errors[0]["exception"], ValueError)
        timer.close()
    finally:
        loop.set_exception_handler(None)


class Flag(Op):
    def __init__(self, timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.expired = asyncio.Event()
        self.on_expiration_hook = self.expired.set


async def expiry_on_real_time() -> float:
    timer = AsyncTimer(asyncio.get_running_loop())
    purgatory = Purgatory("Fetch", timer)
    op = Flag(50)
    started = time.monotonic()
    assert purgatory.try_complete_else_watch(op, [("fetch", "t", 0)]) is False
    await asyncio.wait_for(op.expired.wait(), 1.0)
    elapsed = time.monotonic() - started
    assert (op.completions, op.expirations) == (1, 1)
    assert purgatory.delayed() == 0 and len(timer) == 0 and timer._handle is None
    timer.close()
    return elapsed


async def test_operation_expires_on_real_time() -> None:
    elapsed = await expiry_on_real_time()
    assert 0.045 <= elapsed < 1.0


def test_operation_expires_on_real_time_under_uvloop() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        elapsed = runner.run(expiry_on_real_time())
    assert 0.045 <= elapsed < 1.0


async def test_completed_operation_never_expires_on_real_time() -> None:
    timer = AsyncTimer(asyncio.get_running_loop())
    purgatory = Purgatory("Fetch", timer)
    slow, quick = Flag(5_000), Flag(30)
    purgatory.try_complete_else_watch(slow, ["p"])
    purgatory.try_complete_else_watch(quick, ["p"])
    assert timer._armed_ms is not None
    quick.ready = True
    assert purgatory.check_and_complete("p") == 1
    await asyncio.sleep(0.1)  # past quick's deadline
    assert (quick.completions, quick.expirations) == (1, 0)
    assert slow.completions == 0 and purgatory.delayed() == 1
    purgatory.shutdown()
    timer.close()
