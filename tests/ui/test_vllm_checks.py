"""Issue 44: a vLLM server check held the device queue (another user's run waited 7.5 s behind a 10 s check). The
check now runs before the job joins the queue, in a pool of its own with a deadline of its own (ui/vllm_checks.py):
these tests run it against a server that drips its answer, on a real event loop."""

from __future__ import annotations

import asyncio
import time

from playground.vllm import peer as vllm_peer
from playground.ui import vllm_checks
from tests.listener import listener


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
            running = [asyncio.ensure_future(vllm_checks.check(choice, deadline_s=1.5)) for _ in range(2)]
            await asyncio.sleep(0.2)  # both hold the pool's threads
            start = time.monotonic()
            third = await vllm_checks.check(choice, deadline_s=1.5)
            waited = time.monotonic() - start
            return [third] + list(await asyncio.gather(*running)), waited

        (third, *first_two), waited = asyncio.run(main())
    assert third == vllm_checks.BUSY and waited < 0.2
    assert all("within 1.5 s" in m for m in first_two)


def test_no_vllm_row_checks_nothing_and_a_bad_url_is_named():
    assert asyncio.run(vllm_checks.check((vllm_peer.NO_VLLM, "", "", "", ""))) is None
    message = asyncio.run(vllm_checks.check((vllm_peer.VLLM_URL, "http://x/admin?y=", "", "", "")))
    assert message and ("URL" in message or "vLLM" in message)
