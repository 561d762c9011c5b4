"""The fault soak's faults: drawn at random (seeded) and counted by kind.

Owns the kinds and how each is done: API failures (409, 429, 500, 504 timeouts) and slow
responses through the emulator's fault injection, dropped watches, watch expiry (history
compacted, then watches dropped, so every watch resumes from a version the server no longer
has and gets 410), SIGKILL of a replica and of the leader (each restarted after a pause), and
PostgreSQL connection kills (`pg_terminate_backend` of every session on the soak's database),
and with a primary and standby (`postgres_pair`) failovers and stale promotions. It must not
check invariants.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import asyncpg  # type: ignore[import-untyped]

from gangq.queue.bench.postgres_pair import PostgresPair
from gangq.queue.bench.soak_replica import Replica
from gangq.queue.kubesim.emulator import Emulator

VERBS = ("get", "list", "create", "update", "patch", "delete", None)
RESOURCES = ("pods", "resourceclaims", "trainingjobs", "services", "events", "leases", None)
KILL_PAUSE_S = (0.5, 4.0)
"""A killed replica comes back after this long (uniform)."""
SLOW_WINDOW_S = (2.0, 6.0)
DOWN_S = (0.5, 3.0)
"""How long a killed primary's clients meet only a read-only standby (uniform)."""
LOSS_WINDOW_S = (1.0, 4.0)
"""How long commits go only to the primary before a stale promotion loses them (uniform)."""
RARE = {
    "controller_kill": 0.4,
    "leader_kill": 0.4,
    "postgres_kill": 0.5,
    "postgres_failover": 0.3,
    "postgres_stale_promotion": 0.3,
}
"""Relative weights of the heavier faults once every kind has come once (others weigh 1)."""
TERMINATE_BACKENDS = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
    "WHERE datname = $1 AND pid <> pg_backend_pid()"
)
SELECT_LEADER = "SELECT holder FROM leadership WHERE id = 1"


@dataclass(eq=False)
class Injector:
    """`await injector.inject()` does one fault; `counts` says how many of each kind."""

    cluster: Emulator
    replicas: Sequence[Replica]
    database_dsn: str
    database_name: str
    seed: int
    pair: PostgresPair | None = None
    """The primary and standby behind `database_dsn`, when the soak fails it over."""
    counts: Counter[str] = field(default_factory=Counter)
    _draw: random.Random = field(init=False)
    _pending: set[asyncio.Task[None]] = field(default_factory=set)
    _first_round: list[str] | None = None

    def __post_init__(self) -> None:
        self._draw = random.Random(self.seed)

    def next_pause_s(self) -> float:
        return self._draw.uniform(0.5, 3.0)

    async def inject(self) -> str:
        """One fault: the kinds first come once each in a seeded order (so a short run sees
        them all), then at random with kills and connection kills rarer than the others."""
        kinds: dict[str, Callable[[], Awaitable[bool]]] = {
            "api_409": lambda: self._fail(409),
            "api_429": lambda: self._fail(429),
            "api_500": lambda: self._fail(500),
            "api_timeout": lambda: self._fail(504),
            "api_slow": self._slow,
            "watch_drop": self._drop_watches,
            "watch_expiry": self._expire_watches,
            "controller_kill": self._kill_any,
            "leader_kill": self._kill_leader,
            "postgres_kill": self._kill_connections,
        }
        if self.pair is not None:
            kinds["postgres_failover"] = self._fail_over
            kinds["postgres_stale_promotion"] = self._promote_stale
        for replica in self.replicas:
            if replica.crashed:
                await replica.start()  # counted as an error already; keep two replicas
        names = list(kinds)
        if self._first_round is None:
            self._first_round = self._draw.sample(names, k=len(names))
        if self._first_round:
            name = self._first_round.pop(0)
        else:
            weights = [RARE.get(n, 1.0) for n in names]
            name = self._draw.choices(names, weights=weights)[0]
        if await kinds[name]():
            self.counts[name] += 1
        elif name not in self.counts:
            self._first_round.append(name)  # not possible now (a replica is down): later
        return name

    async def _fail(self, code: int) -> bool:
        self.cluster.faults.fail_next(
            self._draw.randint(1, 3),
            code=code,
            verb=self._draw.choice(VERBS),
            resource=self._draw.choice(RESOURCES),
        )
        return True

    async def _slow(self) -> bool:
        rule = self.cluster.faults.delay(
            self._draw.uniform(0.2, 2.0),
            verb=self._draw.choice(VERBS),
            resource=self._draw.choice(RESOURCES),
        )
        self._later(self._draw.uniform(*SLOW_WINDOW_S), lambda: self._undelay(rule))
        return True

    async def _undelay(self, rule: object) -> None:
        self.cluster.faults.undelay(rule)

    async def _drop_watches(self) -> bool:
        self.cluster.drop_watches()
        return True

    async def _expire_watches(self) -> bool:
        self.cluster.registry.storage.compact()
        self.cluster.drop_watches()
        return True

    async def _kill(self, replica: Replica) -> None:
        await replica.kill()
        self._later(self._draw.uniform(*KILL_PAUSE_S), replica.start)

    async def _kill_any(self) -> bool:
        running = [replica for replica in self.replicas if replica.is_running]
        if len(running) < len(self.replicas):
            return False  # one is already down: keep a replica alive to take over
        await self._kill(self._draw.choice(running))
        return True

    async def _kill_leader(self) -> bool:
        if not all(replica.is_running for replica in self.replicas):
            return False
        holder = await self._leader()
        leader = next((r for r in self.replicas if r.name == holder), None)
        if leader is None:
            return False
        await self._kill(leader)
        return True

    async def _leader(self) -> str | None:
        connection = await asyncpg.connect(self.database_dsn)
        try:
            return await connection.fetchval(SELECT_LEADER)  # type: ignore[no-any-return]
        finally:
            await connection.close()

    async def _kill_connections(self) -> bool:
        connection = await asyncpg.connect(self.database_dsn)
        try:
            await connection.fetchval(TERMINATE_BACKENDS, self.database_name)
        finally:
            await connection.close()
        return True

    async def _fail_over(self) -> bool:
        """The primary dies with every commit on the standby (synchronous); the standby is
        promoted, and a new standby follows it on the dead server's port."""
        pair = self._pair()
        await asyncio.to_thread(pair.kill_primary)
        await asyncio.sleep(self._draw.uniform(*DOWN_S))
        await asyncio.to_thread(pair.promote)
        await asyncio.to_thread(pair.rebuild_standby)
        return True

    async def _promote_stale(self) -> bool:
        """Replication turns asynchronous and stops; what the replicas commit from then on is
        lost when the primary dies and the stale standby is promoted."""
        pair = self._pair()
        await asyncio.to_thread(pair.set_synchronous, False)
        await asyncio.to_thread(pair.pause_replication)
        await asyncio.sleep(self._draw.uniform(*LOSS_WINDOW_S))
        await asyncio.to_thread(pair.kill_primary)
        await asyncio.to_thread(pair.promote)
        await asyncio.to_thread(pair.rebuild_standby)
        return True

    def _pair(self) -> PostgresPair:
        if self.pair is None:
            raise AssertionError("a failover fault drawn without a primary and standby")
        return self.pair

    def _later(self, seconds: float, action: Callable[[], Awaitable[None]]) -> None:
        async def run() -> None:
            await asyncio.sleep(seconds)
            await action()

        task = asyncio.create_task(run(), name="soak-fault-later")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def settle(self) -> None:
        """Finish what is scheduled (restarts, the end of slow windows), then clear faults."""
        while self._pending:
            await asyncio.gather(*list(self._pending))
        self.cluster.faults.clear()
        for replica in self.replicas:
            if not replica.is_running:
                await replica.start()

    async def cancel(self) -> None:
        for task in list(self._pending):
            task.cancel()
        for task in list(self._pending):
            with contextlib.suppress(asyncio.CancelledError):
                await task
