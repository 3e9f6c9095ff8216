"""The Compare pairs tab's vLLM server check, off the device queue: it runs in the event's validator (before the
job joins the queue), in a pool of its own (POOL_SIZE threads) with a deadline of its own (DEADLINE_S), so no
user's run ever waits behind a server that answers slowly. A check that fails refuses the job with the message;
when the pool is full the job is refused at once, saying so, rather than waiting."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import gradio as gr

from playground.vllm import peer as vllm_peer
from playground.core.errors import PlaygroundError
from playground.ui import jobs

POOL_SIZE = 2  # checks at once, all users together
DEADLINE_S = 12.0  # the whole check (each request has its own 10 s: vllm_peer.check), then the job is refused
BUSY = f"{POOL_SIZE} vLLM server checks are running: try again in a few seconds."
_pool = ThreadPoolExecutor(POOL_SIZE, thread_name_prefix="vllm-check")
_slots = threading.BoundedSemaphore(POOL_SIZE)


async def check(vllm: Sequence[str], deadline_s: float = DEADLINE_S) -> str | None:
    """None when no vLLM row is asked for or its engine answers (vllm_peer.check); else what is wrong, in a line."""
    try:
        engine = vllm_peer.engine_choice(*vllm)
    except PlaygroundError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001  a value of the wrong shape: named, never echoed
        return f"The vLLM engine row could not be read ({type(exc).__name__})."
    if engine is None:
        return None
    if not _slots.acquire(blocking=False):
        return BUSY
    stop = threading.Event()
    future = asyncio.get_running_loop().run_in_executor(_pool, vllm_peer.check, engine, stop.is_set)
    future.add_done_callback(lambda _: _slots.release())  # the slot is free once the thread is
    try:
        await asyncio.wait_for(asyncio.shield(future), deadline_s)
    except asyncio.TimeoutError:
        stop.set()  # the check reads it every 0.25 s and ends
        return f"The vLLM server did not answer its check within {deadline_s:g} s: nothing was run."
    except PlaygroundError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001
        return f"The vLLM server check failed ({type(exc).__name__}): nothing was run."
    return None


def admission(inputs: list, shown_on: Any, vllm_inputs: list, vllm_shown_on: Any) -> Callable:
    """jobs.admission, then the vLLM check (check()) of the values of vllm_inputs; a refusal of the check is shown
    under vllm_shown_on."""
    admit = jobs.admission(inputs, shown_on)
    at, where = inputs.index(vllm_shown_on), [inputs.index(i) for i in vllm_inputs]

    async def admit_and_check(request: gr.Request, *values: Any) -> Any:
        verdicts = await admit(request, *values)
        listed = verdicts if isinstance(verdicts, list) else [verdicts]
        if not all(v.get("is_valid", True) for v in listed):
            return verdicts
        message = await check([values[i] for i in where])
        if message is None:
            return verdicts
        return [gr.validate(i != at, message) for i in range(len(inputs))]

    return admit_and_check
