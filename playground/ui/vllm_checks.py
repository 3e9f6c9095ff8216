"""The Compare pairs tab's vLLM server check, off the device queue: it runs in the event's validator (before the
job joins the queue), in a pool of its own (POOL_SIZE threads, PER_ADDRESS of them at most for one network address)
with a deadline of its own (DEADLINE_S), so no user's run ever waits behind a server that answers slowly, and no
address's slow checks keep another's out. A check that fails refuses the job with the message; when the pool (or
the address's share) is full the job is refused at once, saying so, rather than waiting. While it checks, the job
holds its place under the per-client caps (jobs.held_place). What the check found is handed to the job (found()),
which does not ask the server again."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import gradio as gr

from playground.core.errors import PlaygroundError
from playground.ui import jobs
from playground.vllm import peer as vllm_peer
from playground.vllm.server import ServerInfo

POOL_SIZE = 4  # checks at once, all users together
PER_ADDRESS = 1  # checks at once from one network address, so that no address fills the pool
DEADLINE_S = 12.0  # the whole check (each request has its own 10 s: vllm_peer.check), then the job is refused
KEEP_S, KEEP = 600.0, 64  # what a check found is kept this long (the job reads it), for this many engines at most
BUSY = f"{POOL_SIZE} vLLM server checks are running: try again in a few seconds."
BUSY_HERE = "A vLLM server check from your network address is still running: try again once it has answered."
_pool = ThreadPoolExecutor(POOL_SIZE, thread_name_prefix="vllm-check")
_slots = threading.BoundedSemaphore(POOL_SIZE)
_by_address: Counter[str] = Counter()  # checks running per address (under _lock: the pool's threads free them)
_lock = threading.Lock()
_found: dict[vllm_peer.VLLMEngine, tuple[float, dict[str, ServerInfo]]] = {}


def found(engine: vllm_peer.VLLMEngine | None) -> dict[str, ServerInfo] | None:
    """What the latest check of this engine found, by URL (vllm_peer.run_peer's `checked`); None: not checked lately."""
    kept = _found.get(engine) if engine is not None else None
    return kept[1] if kept is not None and time.monotonic() - kept[0] < KEEP_S else None


def _keep(engine: vllm_peer.VLLMEngine, infos: dict[str, ServerInfo]) -> None:
    _found.pop(engine, None)
    _found[engine] = (time.monotonic(), infos)
    while len(_found) > KEEP:  # the oldest first (dicts keep their order)
        _found.pop(next(iter(_found)))


async def check(vllm: Sequence[str], deadline_s: float = DEADLINE_S, address: str = "") -> str | None:
    """None when no vLLM row is asked for or its engine answers (vllm_peer.check); else what is wrong, in a line.
    `address`: the network address asking (its checks share PER_ADDRESS of the pool)."""
    try:
        engine = vllm_peer.engine_choice(*vllm)
    except PlaygroundError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001  a value of the wrong shape: named, never echoed
        return f"The vLLM engine row could not be read ({type(exc).__name__})."
    if engine is None:
        return None
    with _lock:
        if _by_address[address] >= PER_ADDRESS:
            return BUSY_HERE
        if not _slots.acquire(blocking=False):
            return BUSY
        _by_address[address] += 1
    stop = threading.Event()
    future = asyncio.get_running_loop().run_in_executor(_pool, _check, engine, stop, address)
    try:
        _keep(engine, await asyncio.wait_for(asyncio.shield(future), deadline_s))
    except asyncio.TimeoutError:
        stop.set()  # the check reads it every 0.25 s and ends
        return f"The vLLM server did not answer its check within {deadline_s:g} s: nothing was run."
    except PlaygroundError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001
        return f"The vLLM server check failed ({type(exc).__name__}): nothing was run."
    return None


def _check(engine: vllm_peer.VLLMEngine, stop: threading.Event, address: str) -> dict[str, ServerInfo]:
    """vllm_peer.check on a pool thread; its place is free once the thread is (not when the caller gave up)."""
    try:
        return vllm_peer.check(engine, stop.is_set)
    finally:
        with _lock:
            _slots.release()
            _by_address[address] -= 1
            if _by_address[address] <= 0:
                del _by_address[address]


def admission(inputs: list, shown_on: Any, vllm_inputs: list, vllm_shown_on: Any) -> Callable:
    """jobs.admission's refusal, then the vLLM check (check()) of the values of vllm_inputs, the job's place held
    meanwhile; a refusal of the check is shown under vllm_shown_on."""
    at, check_at, where = inputs.index(shown_on), inputs.index(vllm_shown_on), [inputs.index(i) for i in vllm_inputs]

    async def admit_and_check(request: gr.Request, *values: Any) -> Any:
        message, shown = jobs.refusal(request), at
        if message is None:
            place = jobs.held_place(request)  # counted by the caps while the check runs
            address = jobs.client_address(request.request) if request is not None else ""
            message, shown = await check([values[i] for i in where], address=address), check_at
            if place is not None:
                place.done(message is None)
        return [gr.validate(message is None or i != shown, message or "") for i in range(len(inputs))]

    return admit_and_check
