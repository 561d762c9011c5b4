"""How gangq's long-running commands log: text for a terminal, or one JSON object per line for
the log pipelines platform teams ship to (Loki, Elasticsearch).

Owns the two formats, the `--log-level` / `--log-format` options (`GANGQ_LOG_FORMAT`) and the
job a line is about. Code that works on one job says so once, with `about_job(namespace, name)`
around the work (a context variable, so every line logged inside it, in any module and in tasks
started inside it, carries the job), or per call with `extra={"namespace": ..., "job": ...}`.

Levels, by convention across gangq: DEBUG for expected races and retries (they are counted in
`gangq_api_retries_total`) and idle cycles; INFO for state changes; WARNING for trouble gangq
rides out; ERROR for trouble it cannot.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime

from gangq.queue.core.errors import InvalidInputError

FORMATS = ("text", "json")
FORMAT_VARIABLE = "GANGQ_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
JOB_FIELDS = ("namespace", "job")

_job: ContextVar[tuple[str, str] | None] = ContextVar("gangq_log_job", default=None)


@contextlib.contextmanager
def about_job(namespace: str, name: str) -> Iterator[None]:
    """Every line logged inside carries `namespace` and `job` (the TrainingJob's name)."""
    token = _job.set((namespace, name))
    try:
        yield
    finally:
        _job.reset(token)


class JobFilter(logging.Filter):
    """Puts the job of the current context on records that did not name one via `extra=`."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = _job.get()
        if current is not None and not hasattr(record, "job"):
            record.namespace, record.job = current
        return True


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message"[, "namespace", "job"][, "exception"]}`."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in JOB_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def add_arguments(parser: argparse.ArgumentParser, *, level: str) -> None:
    parser.add_argument(
        "--log-level", default=level, help=f"debug, info, warning or error (default {level})"
    )
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default=os.environ.get(FORMAT_VARIABLE) or "text",
        help=f"text, or json: one object per line (default ${FORMAT_VARIABLE} or text)",
    )


def configure(*, level: str, log_format: str) -> None:
    """One handler on the root logger (stderr); libraries' loggers, uvicorn's included when it
    is given `log_config=None`, propagate to it."""
    if log_format not in FORMATS:
        raise InvalidInputError(
            f"log format {log_format!r} (${FORMAT_VARIABLE}?): use one of {', '.join(FORMATS)}"
        )
    handler = logging.StreamHandler()
    handler.addFilter(JobFilter())
    formatter = JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
