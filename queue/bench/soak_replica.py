"""One controller replica of the fault soak: `gangq run` in a process of its own, killable.

Owns starting a replica (`gangq run` with the soak's database, kubeconfig, token file and a
port for its REST API), SIGKILL, and reading its log: every asyncio error it reports (a
future or task exception never retrieved, an exception reaching the event loop's handler, an
ERROR record carrying a traceback) arrives as one marker line on stderr, counted here. The
marker comes from `main`, the replica's entry point, which installs a logging handler and a
loop exception handler before running the controller. Each start's stderr is kept whole in a
file of its own, and an exit nobody asked for keeps the last lines (the traceback) for the
report. It must not judge the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gangq.queue import eventloop

MARKER = "gangq-soak-error:"
"""Prefix of the line a replica prints for each asyncio error or unhandled exception."""
ENTRY = "from gangq.queue.bench import soak_replica; soak_replica.main()"
TAIL_LINES = 40
LEADER_RETRY_S = 0.5
"""A follower campaigns this often, so a takeover after a leader kill takes about a second."""
CYCLE_INTERVAL_S = 1.0


def _mark(source: str, message: str, error: BaseException | None) -> None:
    first = message.splitlines()[0] if message else source
    detail = f" {error!r}" if error is not None else ""
    sys.stderr.write(f"{MARKER} {source}: {first}{detail}\n")
    sys.stderr.flush()


class _ErrorMarks(logging.Handler):
    """Marks ERROR records that carry an exception (an unhandled one a library logged) or
    report one never retrieved; asyncio's own reports are marked by `_loop_errors`."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "asyncio" or record.levelno < logging.ERROR:
            return
        message = record.getMessage()
        if record.exc_info or "exception was never retrieved" in message:
            _mark(record.name, message, record.exc_info[1] if record.exc_info else None)


def _loop_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """What asyncio reports (a future or task exception never retrieved, a failed callback):
    marked once here, then logged as usual by the default handler."""
    _mark("asyncio", str(context.get("message", "")), context.get("exception"))
    loop.default_exception_handler(context)


async def _serve(settings: Any, *, port: int, metrics_port: int) -> None:
    from gangq.queue.cli import run

    asyncio.get_running_loop().set_exception_handler(_loop_errors)
    await run.serve(settings, host="127.0.0.1", port=port, metrics_port=metrics_port)


def main() -> None:
    """`python -c ENTRY --database-url URL --kubeconfig PATH --port N --metrics-port M
    --holder NAME`, with the REST API's token file in GANGQ_TOKEN_FILE."""
    import argparse

    from gangq.queue import config

    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--holder", required=True)
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger().addHandler(_ErrorMarks())
    settings = config.load(
        database_url=args.database_url,
        kubeconfig=args.kubeconfig,
        holder=args.holder,
        leader_retry_s=LEADER_RETRY_S,
        cycle_interval_s=CYCLE_INTERVAL_S,
    )
    eventloop.run(_serve(settings, port=args.port, metrics_port=args.metrics_port))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True, slots=True)
class Exit:
    """A replica that ended on its own: which start, how, where its whole stderr is."""

    replica: str
    start: int
    status: int
    log: str
    tail: tuple[str, ...]

    def report(self) -> dict[str, object]:
        return asdict(self)


@dataclass(eq=False)
class Replica:
    """A named replica; `start` and `kill` may alternate for ever. `logs` is the directory
    that keeps each start's stderr (`NAME.START.log`); `echo` hears of each unexpected exit."""

    name: str
    database_url: str
    kubeconfig: Path
    token_file: Path
    logs: Path
    echo: Callable[[str], None]
    port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    errors: list[str] = field(default_factory=list)
    exits: list[Exit] = field(default_factory=list)
    crashed: bool = False
    """Exited on its own since the last start; the soak starts it again."""
    starts: int = 0
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    _process: asyncio.subprocess.Process | None = None
    _reader: asyncio.Task[None] | None = None
    _killed: bool = False

    @property
    def log(self) -> Path:
        """The stderr of the current (or last) start."""
        return self.logs / f"{self.name}.{self.starts}.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def start(self) -> None:
        env = dict(os.environ, GANGQ_TOKEN_FILE=str(self.token_file), PYTHONUNBUFFERED="1")
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            ENTRY,
            f"--database-url={self.database_url}",
            f"--kubeconfig={self.kubeconfig}",
            f"--port={self.port}",
            f"--metrics-port={self.metrics_port}",
            f"--holder={self.name}",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        self._killed = False
        self.crashed = False
        self.starts += 1
        self.tail.clear()
        self._reader = asyncio.create_task(self._read(self._process), name=f"soak-{self.name}-log")

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stderr is not None
        start, path = self.starts, self.log
        with path.open("w") as log:
            log.write(f"--- {self.name} start {start} (pid {process.pid})\n")
            async for raw in process.stderr:
                line = raw.decode(errors="replace").rstrip("\n")
                log.write(line + "\n")
                self.tail.append(line)
                if line.startswith(MARKER):
                    self.errors.append(line.removeprefix(MARKER).strip())
            code = await process.wait()
            log.write(f"--- {self.name} exited with {code}\n")
        if not self._killed:
            # An exit nobody asked for is an unhandled exception (Python printed it): count it.
            self.crashed = True
            self.errors.append(f"exited unexpectedly with status {code} (start {start}, {path})")
            self.exits.append(Exit(self.name, start, code, str(path), tuple(self.tail)))
            self.echo(
                f"{self.name} start {start} exited with status {code}; last lines of {path}:\n"
                + "\n".join(self.tail)
            )

    async def kill(self) -> None:
        """SIGKILL: no cleanup, as a crashed node or an OOM kill would leave it."""
        process = self._process
        if process is None or process.returncode is not None:
            return
        self._killed = True
        process.send_signal(signal.SIGKILL)
        await process.wait()
        if self._reader is not None:
            await self._reader

    async def stop(self) -> None:
        """SIGTERM and wait: the orderly end of a run."""
        process = self._process
        if process is None or process.returncode is not None:
            return
        self._killed = True
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout=15)
        except TimeoutError:
            process.kill()
            await process.wait()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
