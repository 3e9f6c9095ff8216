"""Issue 44: a vLLM server check held the device queue (another user's run waited 7.5 s behind a 10 s check). The
check now runs before the job joins the queue, in a pool of its own with a deadline of its own (ui/vllm_checks.py):
these tests run it against a server that drips its answer, on a real event loop."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from playground.ui import jobs, vllm_checks
from playground.ui.common import DECODING
from playground.vllm import peer as vllm_peer
from playground.vllm.server import VLLMServer
from tests.listener import listener
from test_jobs import event, gradio_queue, request


@pytest.fixture(autouse=True)
def no_holds_left():
    """Each test starts with no place held (ui/fair_queue.py) and no check still running from the one before."""
    from playground.ui import fair_queue

    fair_queue._holds.clear()
    yield
    fair_queue._holds.clear()
    end = time.monotonic() + 5
    while vllm_checks._by_address and time.monotonic() < end:  # a check given up on ends within 0.25 s of it
        time.sleep(0.05)


async def _ticks_while(task: asyncio.Task, every_s: float = 0.05) -> int:
    """How often the event loop ran something else while `task` ran (a blocked loop would run nothing)."""
    ticks = 0
    while not task.done():
        await asyncio.sleep(every_s)
        ticks += 1
    return ticks


def test_a_slow_server_is_refused_at_the_checks_own_deadline_and_the_event_loop_runs_on(monkeypatch):
    with listener("drip", drip_s=0.2, drips=100) as (url, seen):
        monkeypatch.setenv("PLAYGROUND_VLLM_URLS", url)

        async def main() -> tuple[str | None, int, float]:
            start = time.monotonic()
            task = asyncio.ensure_future(vllm_checks.check((vllm_peer.VLLM_URL, url, "", "", ""), deadline_s=1.0))
            ticks = await _ticks_while(task)
            return task.result(), ticks, time.monotonic() - start

        message, ticks, took = asyncio.run(main())
    assert message is not None and "within 1 s" in message and "nothing was run" in message
    assert took < 3 and ticks >= 10  # the page's other events (and the device queue) were served meanwhile
    assert seen.requests  # the check did reach the listed server


def test_beyond_the_pools_size_a_check_is_refused_at_once_not_queued(monkeypatch):
    with listener("drip", drip_s=0.2, drips=100) as (url, _):
        monkeypatch.setenv("PLAYGROUND_VLLM_URLS", url)
        choice = (vllm_peer.VLLM_URL, url, "", "", "")

        async def main() -> tuple[list, float]:
            running = [
                asyncio.ensure_future(vllm_checks.check(choice, deadline_s=1.5, address=f"10.0.0.{i}"))
                for i in range(vllm_checks.POOL_SIZE)
            ]
            await asyncio.sleep(0.2)  # they hold the pool's threads
            start = time.monotonic()
            next_one = await vllm_checks.check(choice, deadline_s=1.5, address="10.0.0.99")
            waited = time.monotonic() - start
            return [next_one] + list(await asyncio.gather(*running)), waited

        (next_one, *first), waited = asyncio.run(main())
    assert next_one == vllm_checks.BUSY and waited < 0.2
    assert all("within 1.5 s" in m for m in first)


def test_one_address_cannot_fill_the_pool_and_another_addresss_check_still_runs(monkeypatch):
    """Issue 55: one address filled the 2-slot pool with two slow checks, and every other user's vLLM row was refused
    for about 12 s. Now an address has PER_ADDRESS check at a time; the pool's other places stay for the others."""
    with listener("drip", drip_s=0.2, drips=100) as (slow, _), listener("vllm") as (good, seen):
        monkeypatch.setenv("PLAYGROUND_VLLM_URLS", f"{slow},{good}")

        async def main() -> tuple[list, str | None]:
            mine = [
                asyncio.ensure_future(vllm_checks.check((vllm_peer.VLLM_URL, slow, "", "", ""), 1.5, "10.6.6.6"))
                for _ in range(vllm_checks.POOL_SIZE)
            ]
            await asyncio.sleep(0.2)
            theirs = await vllm_checks.check((vllm_peer.VLLM_URL, good, "", "", ""), 5.0, "10.0.0.1")
            return list(await asyncio.gather(*mine)), theirs

        mine, theirs = asyncio.run(main())
    assert theirs is None and seen.requests, (theirs, mine)  # the other address was checked, and passed
    assert sum(m == vllm_checks.BUSY_HERE for m in mine) == vllm_checks.POOL_SIZE - vllm_checks.PER_ADDRESS, mine
    assert sum("within 1.5 s" in (m or "") for m in mine) == vllm_checks.PER_ADDRESS


def test_what_the_check_found_goes_to_the_job_which_asks_nothing_again(monkeypatch):
    """Issue 55: the job checked the server again (vllm.peer._run_server called check() on a new server object)."""
    with listener("vllm") as (url, seen):
        monkeypatch.setenv("PLAYGROUND_VLLM_URLS", url)
        choice = (vllm_peer.VLLM_URL, url, "", "", "")
        assert asyncio.run(vllm_checks.check(choice)) is None
        asked = len(seen.requests)
        info = vllm_checks.found(vllm_peer.engine_choice(*choice))[url]
        server = VLLMServer(url, checked=info)
        assert server.check() is info and len(seen.requests) == asked  # nothing asked again


def test_the_per_client_cap_holds_while_a_check_runs(monkeypatch):
    """Issue 55: one client had 4 of 4 jobs run against a cap of 2 while vLLM checks ran (a job being checked was not
    counted). Now it holds its place from the moment its check starts."""
    with listener("drip", drip_s=0.2, drips=100) as (url, _):
        monkeypatch.setenv("PLAYGROUND_VLLM_URLS", url)
        queue = gradio_queue(waiting=[event("a")])  # client a has one run waiting
        inputs = ["prompt", "source", "url", "model", "target", "key"]
        admit = vllm_checks.admission(inputs, "prompt", inputs[1:], "url")
        plain = jobs.admission(["prompt"], "prompt")

        async def main() -> tuple[Any, Any, Any]:
            checking = asyncio.ensure_future(admit(request(queue, "a"), "hi", vllm_peer.VLLM_URL, url, "", "", ""))
            await asyncio.sleep(0.2)  # its check runs
            second = await plain(request(queue, "a"))  # a third job of client a: refused
            other = await plain(request(queue, "b"))
            return await checking, second, other

        _, second, other = asyncio.run(main())
    assert second["is_valid"] is False and "You already have 2 runs" in second["message"]
    assert other["is_valid"] is True


def test_a_job_let_in_counts_until_its_event_is_in_the_queue():
    """Between the validator's verdict and Gradio's append the job is in neither: it counts as held meanwhile."""
    queue = gradio_queue(waiting=[event("a")])
    plain = jobs.admission(["prompt"], "prompt")
    assert asyncio.run(plain(request(queue, "a")))["is_valid"] is True  # let in, not yet in the queue
    assert asyncio.run(plain(request(queue, "a")))["is_valid"] is False  # the cap counts it
    queue.event_queue_per_concurrency_id[DECODING].queue.append(event("a", at=time.monotonic()))
    assert asyncio.run(plain(request(queue, "a")))["is_valid"] is False  # 2 in the queue, the hold matched: still 2
    assert (
        len(jobs.held_now([])) == 1 and jobs.held_now(list(queue.event_queue_per_concurrency_id[DECODING].queue)) == []
    )


def test_no_vllm_row_checks_nothing_and_a_bad_url_is_named():
    assert asyncio.run(vllm_checks.check((vllm_peer.NO_VLLM, "", "", "", ""))) is None
    message = asyncio.run(vllm_checks.check((vllm_peer.VLLM_URL, "http://x/admin?y=", "", "", "")))
    assert message and ("URL" in message or "vLLM" in message)
