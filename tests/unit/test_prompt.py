"""timing.prompt: a Prompt drives a coroutine as a Task does, except that setting a
PromptFuture it awaits runs its next step inside ``set_result``."""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref

import pytest

from shoal.broker.timing.prompt import Prompt, PromptFuture


class Outcome:
    def __init__(self) -> None:
        self.results: list = []
        self.errors: list[BaseException] = []

    def prompt(self, coro) -> Prompt:
        return Prompt(coro, self.results.append, self.errors.append)


async def turn() -> None:
    """Let the callbacks already scheduled run."""
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_prompt_future_resumes_its_waiter_inside_set_result() -> None:
    out = Outcome()
    fut = PromptFuture()
    steps: list[str] = []

    async def handler() -> str:
        steps.append("started")
        got = await fut
        steps.append(f"resumed with {got}")
        return "answer"

    out.prompt(handler())
    assert steps == []  # the first step runs a turn later, as a Task's does
    await turn()
    assert steps == ["started"]
    fut.set_result(7)
    assert steps == ["started", "resumed with 7"]  # before set_result returned
    assert out.results == ["answer"] and out.errors == []


async def test_under_a_task_the_same_wait_resumes_a_turn_later() -> None:
    """The contrast the Prompt exists for (and what ShareAcknowledge-by-Task callers still get)."""
    fut = PromptFuture()
    steps: list[str] = []

    async def handler() -> None:
        await fut
        steps.append("resumed")

    task = asyncio.ensure_future(handler())
    await turn()
    fut.set_result(None)
    assert steps == []
    await task
    assert steps == ["resumed"]


async def test_other_waits_resume_a_turn_later_as_under_a_task() -> None:
    out = Outcome()
    plain = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def handler() -> int:
        await asyncio.sleep(0)
        steps.append("after sleep(0)")
        value = await plain
        steps.append("after plain")
        done = PromptFuture()
        done.set_result(1)
        return value + await done  # already done: no wait at all

    out.prompt(handler())
    await turn()
    assert steps == ["after sleep(0)"]
    plain.set_result(41)
    assert steps == ["after sleep(0)"]
    await turn()
    assert steps == ["after sleep(0)", "after plain"]
    assert out.results == [42]


async def test_errors_go_to_on_error_once() -> None:
    out = Outcome()
    fut = PromptFuture()

    async def handler() -> None:
        await fut
        raise ValueError("bug")

    out.prompt(handler())
    await turn()
    fut.set_result(None)
    assert [type(e) for e in out.errors] == [ValueError] and out.results == []


async def test_a_failed_wait_raises_in_the_handler() -> None:
    out = Outcome()
    plain = asyncio.get_running_loop().create_future()

    async def handler() -> str:
        try:
            await plain
        except KeyError:
            return "handled"
        return "not raised"

    out.prompt(handler())
    await turn()
    plain.set_exception(KeyError("k"))
    await turn()
    assert out.results == ["handled"]


async def test_awaiting_what_is_not_a_future_is_an_error() -> None:
    out = Outcome()

    class Odd:
        def __await__(self):
            yield "not a future"

    async def handler() -> None:
        await Odd()

    out.prompt(handler())
    await turn()
    assert len(out.errors) == 1 and "not an asyncio future" in str(out.errors[0])


@pytest.mark.parametrize("kind", ["prompt", "plain"])
async def test_cancel_cancels_the_wait_closes_the_handler_and_answers_nothing(kind) -> None:
    out = Outcome()
    fut = PromptFuture() if kind == "prompt" else asyncio.get_running_loop().create_future()
    cleaned: list[bool] = []

    async def handler() -> None:
        try:
            await fut
        finally:
            cleaned.append(True)

    p = out.prompt(handler())
    await turn()
    p.cancel()
    assert fut.cancelled() and cleaned == [True] and p.done()
    await turn()
    assert out.results == [] and out.errors == []
    p.cancel()  # twice is harmless


async def test_cancel_before_the_first_step_runs_nothing() -> None:
    out = Outcome()
    started: list[bool] = []

    async def handler() -> None:
        started.append(True)

    out.prompt(handler()).cancel()
    await turn()
    assert started == [] and out.results == []


async def test_a_failing_answer_is_logged_not_raised_into_whoever_set_the_future(caplog) -> None:
    fut = PromptFuture()

    async def handler() -> str:
        await fut
        return "x"

    def answer(_value) -> None:
        raise RuntimeError("the connection broke")

    Prompt(handler(), answer, lambda e: None)
    await turn()
    with caplog.at_level(logging.ERROR, logger="shoal.prompt"):
        fut.set_result(None)  # must not raise
    assert "answering a handler failed" in caplog.text


@pytest.mark.parametrize("how", ["exception", "cancel"])
async def test_a_prompt_future_that_fails_or_is_cancelled_resumes_its_waiter_at_once(how) -> None:
    out = Outcome()
    fut = PromptFuture()

    async def handler() -> None:
        await fut

    out.prompt(handler())
    await turn()
    if how == "exception":
        fut.set_exception(KeyError("k"))
    else:
        fut.cancel()
    expected = KeyError if how == "exception" else asyncio.CancelledError
    assert [type(e) for e in out.errors] == [expected]


async def test_a_finished_prompt_is_freed_without_the_cyclic_collector() -> None:
    """The broker's callbacks close over their Prompt (to discard it from the connection's set).
    Left in place, each request was a reference cycle: under load the cyclic collector's runs
    then stalled the loop for 50-70 ms about once a second (benchmarks/share_scaling.py)."""
    fut = PromptFuture()
    answers: list = []

    async def handler() -> str:
        await fut
        return "x"

    def start() -> weakref.ref:
        def answered(value) -> None:
            answers.append((value, prompt.done()))

        prompt = Prompt(handler(), answered, answered)
        return weakref.ref(prompt)

    ref = start()
    await turn()
    gc.disable()
    try:
        fut.set_result(None)
        assert answers == [("x", True)]
        assert ref() is None, "a finished Prompt is kept alive by a cycle"
    finally:
        gc.enable()
