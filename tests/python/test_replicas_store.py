"""The store server under the replica tests is itself atomic (issue 17, "What to build" 1).

Before zarrd replicas are trusted to Azurite's conditional writes, the emulator is raced directly
(Shared Key signed REST calls, no zarrd, no object_store): 32 threads each make 20 conditional
increments of one counter (read with its ETag, write with `If-Match`, retry on 412) and the counter
must end at exactly 640 with 640 acknowledged writes; 32 threads creating the same blob with
`If-None-Match: *` must produce exactly one winner, whose body is what is stored.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from azurite import BlobClient

THREADS = 32
INCREMENTS = 20
MAX_ATTEMPTS = 2000  # per increment: far above what 32-way contention needs, but bounded
DEADLINE_S = 120.0


def test_conditional_increments_never_lose_one(azurite_endpoint):
    admin = BlobClient(azurite_endpoint)
    container = f"race-{uuid.uuid4().hex[:8]}"
    admin.create_container(container)
    assert admin.put(container, "counter", b"0", if_none_match="*").status_code == 201
    deadline = time.monotonic() + DEADLINE_S
    conflicts = [0] * THREADS

    def worker(i: int) -> int:
        client = BlobClient(azurite_endpoint)
        rng = random.Random(i)
        done = 0
        for _ in range(INCREMENTS):
            for _attempt in range(MAX_ATTEMPTS):
                assert time.monotonic() < deadline, "the race did not finish in time"
                got = client.get(container, "counter")
                assert got.status_code == 200, got.text
                value = int(got.content)
                put = client.put(container, "counter", str(value + 1).encode(), if_match=got.headers["ETag"])
                if put.status_code == 201:
                    done += 1
                    break
                assert put.status_code == 412, f"{put.status_code} {put.text}"
                conflicts[i] += 1
                time.sleep(rng.uniform(0, 0.002))
            else:
                raise AssertionError(f"increment not done in {MAX_ATTEMPTS} attempts")
        return done

    with ThreadPoolExecutor(THREADS) as pool:
        acknowledged = sum(pool.map(worker, range(THREADS)))
    final = int(admin.get(container, "counter").content)
    print(f"\nAzurite direct race: {acknowledged} acknowledged increments, counter {final}, "
          f"{sum(conflicts)} 412 conflicts retried")  # fmt: skip
    assert acknowledged == THREADS * INCREMENTS
    assert final == THREADS * INCREMENTS, f"{THREADS * INCREMENTS - final} acknowledged increments lost"
    assert sum(conflicts) > 0, "the threads never contended: the race proves nothing"


def test_if_none_match_creates_have_one_winner(azurite_endpoint):
    admin = BlobClient(azurite_endpoint)
    container = f"create-{uuid.uuid4().hex[:8]}"
    admin.create_container(container)
    clients = [BlobClient(azurite_endpoint) for _ in range(THREADS)]
    for round_ in range(5):
        key = f"once-{round_}"
        start = threading.Barrier(THREADS, timeout=30)

        def create(i: int, key: str = key, start: threading.Barrier = start) -> int:
            start.wait()
            return clients[i].put(container, key, f"writer {i}".encode(), if_none_match="*").status_code

        with ThreadPoolExecutor(THREADS) as pool:
            codes = list(pool.map(create, range(THREADS)))
        winners = [i for i, c in enumerate(codes) if c == 201]
        assert len(winners) == 1, f"round {round_}: {len(winners)} winners, codes {sorted(set(codes))}"
        assert all(c in (409, 412) for c in codes if c != 201), sorted(set(codes))
        assert admin.get(container, key).content == f"writer {winners[0]}".encode()
