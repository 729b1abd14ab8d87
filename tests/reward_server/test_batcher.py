"""The batcher's batch formation (`reward_server.batching`): a batch stays open while jobs keep coming and while
requests are on their way to the queue, never past `LINGER` x `max_wait_ms`, and closes at once when full.

Closed-loop clients (a GRPO step's groups, each waiting for its answer) come back together when a batch is
answered, but reach the queue a few ms apart; a fixed window from the first one cut them into two part batches.
The run function here records batch sizes; timings are in hundreds of ms so a loaded machine keeps them apart.
"""

from __future__ import annotations

import asyncio
import time

from reward_server.batching import LINGER, Batcher


def _batcher(sizes: list[int], **options) -> Batcher:
    def run_batch(payloads, stop=None):
        sizes.append(len(payloads))
        return list(payloads)

    return Batcher(run_batch, max_queue=64, **options)


async def _submit_spaced(batcher: Batcher, n: int, gap_s: float) -> list:
    async def one(i: int):
        await asyncio.sleep(i * gap_s)
        return await batcher.submit(i, 1, timeout_s=30)

    return await asyncio.gather(*(one(i) for i in range(n)))


def test_a_batch_stays_open_while_jobs_keep_coming():
    async def main() -> list[int]:
        sizes: list[int] = []
        batcher = _batcher(sizes, max_batch_items=32, max_wait_ms=300)
        await batcher.start()
        await _submit_spaced(batcher, 6, 0.1)  # 0.5 s in all: past one window, each within one of the last
        await batcher.stop()
        return sizes

    assert asyncio.run(main()) == [6]


def test_a_full_batch_closes_at_once_and_a_quiet_one_after_max_wait():
    async def main() -> tuple[list[int], float]:
        sizes: list[int] = []
        batcher = _batcher(sizes, max_batch_items=4, max_wait_ms=5000)
        await batcher.start()
        start = time.perf_counter()
        await _submit_spaced(batcher, 4, 0.0)
        full_s = time.perf_counter() - start
        await batcher.stop()
        return sizes, full_s

    sizes, full_s = asyncio.run(main())
    assert sizes == [4] and full_s < 2.0  # full: not a 5 s wait

    async def quiet() -> list[int]:
        sizes: list[int] = []
        batcher = _batcher(sizes, max_batch_items=32, max_wait_ms=100)
        await batcher.start()
        await _submit_spaced(batcher, 2, 0.6)  # a gap longer than max_wait: two batches
        await batcher.stop()
        return sizes

    assert asyncio.run(quiet()) == [1, 1]


def test_a_batch_waits_for_requests_on_their_way_but_not_past_its_linger():
    async def main() -> tuple[list[int], float]:
        sizes: list[int] = []
        batcher = _batcher(sizes, max_batch_items=32, max_wait_ms=100)
        await batcher.start()
        batcher.incoming.count = 1  # a request read and being parsed: the batch waits for it
        first = asyncio.ensure_future(batcher.submit("first", 1, timeout_s=30))
        await asyncio.sleep(0.35)  # longer than max_wait
        batcher.incoming.count = 0
        await batcher.submit("second", 1, timeout_s=30)
        await first
        # A request that never arrives holds a batch LINGER x max_wait at most.
        batcher.incoming.count = 1
        start = time.perf_counter()
        await batcher.submit("alone", 1, timeout_s=30)
        held_s = time.perf_counter() - start
        batcher.incoming.count = 0
        await batcher.stop()
        return sizes, held_s

    sizes, held_s = asyncio.run(main())
    assert sizes == [2, 1]
    assert 0.9 * LINGER * 0.1 <= held_s < LINGER * 0.1 + 1.5
