"""The log formats of `gangq run` and `gangq demo`: JSON objects, one a line, with their job."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

from gangq.queue import logconfig
from gangq.queue.cli import build_parser
from gangq.queue.core.errors import InvalidInputError


@pytest.fixture
def json_lines() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger with the JSON handler `configure` installs, writing to a buffer."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logconfig.JobFilter())
    handler.setFormatter(logconfig.JsonFormatter())
    logger = logging.getLogger("gangq.test.logconfig")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)


def read(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def test_each_line_is_one_object_with_the_job_of_its_context(
    json_lines: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = json_lines
    logger.info("no job here")
    with logconfig.about_job("ml-train", "train-llm"):
        # A task started inside inherits the job; a multi-line message stays one line.
        await asyncio.create_task(asyncio.to_thread(logger.warning, "released\nall %d", 4))
    logger.debug("named", extra={"namespace": "prod", "job": "llm"})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("failed")
    lines = read(stream)
    assert len(stream.getvalue().splitlines()) == 4
    assert [{k: v for k, v in line.items() if k != "time"} for line in lines[:3]] == [
        {"level": "INFO", "logger": "gangq.test.logconfig", "message": "no job here"},
        {
            "level": "WARNING",
            "logger": "gangq.test.logconfig",
            "message": "released\nall 4",
            "namespace": "ml-train",
            "job": "train-llm",
        },
        {
            "level": "DEBUG",
            "logger": "gangq.test.logconfig",
            "message": "named",
            "namespace": "prod",
            "job": "llm",
        },
    ]
    assert str(lines[0]["time"]).endswith("+00:00")
    assert "RuntimeError: boom" in str(lines[3]["exception"])
    assert "job" not in lines[3]


def test_run_and_demo_take_the_format_from_the_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert build_parser().parse_args(["run"]).log_format == "text"
    assert build_parser().parse_args(["demo", "--log-format", "json"]).log_format == "json"
    monkeypatch.setenv(logconfig.FORMAT_VARIABLE, "json")
    assert build_parser().parse_args(["run"]).log_format == "json"
    assert build_parser().parse_args(["demo"]).log_level == "warning"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--log-format", "xml"])


def test_an_unknown_format_from_the_environment_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="GANGQ_LOG_FORMAT"):
        logconfig.configure(level="info", log_format="xml")
