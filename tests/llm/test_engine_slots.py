"""The engine's max_in_flight slots: a semaphore whose free acquire is no coroutine."""

from __future__ import annotations

import asyncio

from fabrika.llm.engine import Slots


async def _hold(slots: Slots, name: str, order: list[str], gate: asyncio.Event, live: list[int]) -> None:
    if not slots.take():
        await slots.wait()
    live[0] += 1
    live[1] = max(live[1], live[0])
    order.append(name)
    try:
        await gate.wait()
    finally:
        live[0] -= 1
        slots.release()


async def test_at_most_n_at_once_first_come_first_served() -> None:
    slots, order, gate, live = Slots(2), [], asyncio.Event(), [0, 0]
    tasks = [asyncio.create_task(_hold(slots, f"t{i}", order, gate, live)) for i in range(6)]
    await asyncio.sleep(0)
    assert order == ["t0", "t1"] and slots.locked()
    gate.set()
    await asyncio.gather(*tasks)
    assert order == [f"t{i}" for i in range(6)] and live == [0, 2]
    assert slots.free == 2 and not slots.locked()


async def test_no_barging_past_a_waiter() -> None:
    slots = Slots(1)
    assert slots.take()
    waiter = asyncio.create_task(slots.wait())
    await asyncio.sleep(0)
    slots.release()  # handed to the waiter, not made free
    assert not slots.take()
    await waiter
    slots.release()
    assert slots.take()


async def test_a_cancelled_waiter_takes_no_slot_and_passes_on_one_it_was_handed() -> None:
    slots = Slots(1)
    assert slots.take()
    gone = asyncio.create_task(slots.wait())
    handed = asyncio.create_task(slots.wait())
    last = asyncio.create_task(slots.wait())
    await asyncio.sleep(0)
    gone.cancel()  # cancelled while waiting: never holds a slot
    await asyncio.sleep(0)
    slots.release()  # to `handed` (the first waiter still waiting) ...
    handed.cancel()  # ... which is cancelled before it runs: the slot goes on to `last`
    await asyncio.gather(gone, handed, return_exceptions=True)
    for _ in range(3):
        await asyncio.sleep(0)
    assert last.done() and not last.cancelled()
    assert slots.free == 0
    slots.release()
    assert slots.free == 1 and not slots.locked()
