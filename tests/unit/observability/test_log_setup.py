"""Structured logging: JSON and text shape, verbosity, fields bound per task via contextvars."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from computedomain.observability import logging as cdlog
from computedomain.runtime import controller as runtime_controller


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    # A private logger that does not propagate keeps pytest's root handlers out of the way.
    test_logger = logging.getLogger("computedomain.test.logsetup")
    test_logger.propagate = False
    yield test_logger
    test_logger.handlers.clear()


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_line_has_the_standard_fields_and_extras(logger: logging.Logger) -> None:
    stream = io.StringIO()
    cdlog.configure_logging(log_format="json", stream=stream, logger=logger)
    logger.info("Created DaemonSet", extra={"DaemonSet": {"name": "ds", "namespace": "drv"}})
    (record,) = lines(stream)
    assert record["msg"] == "Created DaemonSet"
    assert record["level"] == "info"
    assert record["v"] == 0
    assert record["logger"] == "computedomain.test.logsetup"
    assert record["DaemonSet"] == {"name": "ds", "namespace": "drv"}
    assert record["ts"].endswith("Z")
    assert list(record)[:3] == ["ts", "level", "v"]


def test_exception_becomes_err_and_stacktrace(logger: logging.Logger) -> None:
    stream = io.StringIO()
    cdlog.configure_logging(stream=stream, logger=logger)
    try:
        raise RuntimeError("apiserver said no")
    except RuntimeError:
        logger.exception("Reconciler error")
    (record,) = lines(stream)
    assert record["level"] == "error"
    assert record["err"] == "apiserver said no"
    assert "RuntimeError: apiserver said no" in record["stacktrace"]


def test_err_passed_as_extra_exception_is_rendered_as_text(logger: logging.Logger) -> None:
    stream = io.StringIO()
    cdlog.configure_logging(stream=stream, logger=logger)
    logger.warning("Retrying", extra={"err": ValueError("conflict")})
    (record,) = lines(stream)
    assert record["err"] == "conflict"
    assert record["level"] == "warning"


def test_verbosity_gates_v_levels(logger: logging.Logger) -> None:
    stream = io.StringIO()
    cdlog.configure_logging(stream=stream, logger=logger, verbosity=2)
    logger.log(cdlog.v(1), "shown")
    logger.log(cdlog.v(2), "shown too")
    logger.log(cdlog.v(3), "hidden")
    logger.debug("hidden")
    assert [(r["msg"], r["v"]) for r in lines(stream)] == [("shown", 1), ("shown too", 2)]


def test_reconcile_fields_are_bound_per_context(logger: logging.Logger) -> None:
    stream = io.StringIO()
    cdlog.configure_logging(stream=stream, logger=logger)
    with cdlog.bind(**cdlog.reconcile_fields("computedomain", "team", "cd")):
        logger.info("Reconciling")
    logger.info("Outside")
    inside, outside = lines(stream)
    assert inside["controller"] == "computedomain"
    assert inside["controllerKind"] == "ComputeDomain"
    assert inside["ComputeDomain"] == {"name": "cd", "namespace": "team"}
    assert (inside["namespace"], inside["name"]) == ("team", "cd")
    assert "controller" not in outside


async def test_concurrent_tasks_keep_their_own_fields(logger: logging.Logger) -> None:
    stream = io.StringIO()
    cdlog.configure_logging(stream=stream, logger=logger)
    both_bound = asyncio.Barrier(2)

    async def reconcile(name: str) -> None:
        with cdlog.bind(name=name):
            await both_bound.wait()
            logger.info("Reconciled", extra={"who": name})

    await asyncio.gather(reconcile("a"), reconcile("b"))
    assert sorted((r["name"], r["who"]) for r in lines(stream)) == [("a", "a"), ("b", "b")]


def test_reconcile_id_and_controller_come_from_the_runtime_runner(
    logger: logging.Logger,
) -> None:
    stream = io.StringIO()
    cdlog.configure_logging(stream=stream, logger=logger)
    id_token = runtime_controller.reconcile_id.set("4f1c")
    name_token = runtime_controller.controller_name.set("computedomain")
    logger.info("Inside")
    runtime_controller.controller_name.reset(name_token)
    runtime_controller.reconcile_id.reset(id_token)
    logger.info("Outside")
    inside, outside = lines(stream)
    assert inside["reconcileID"] == "4f1c"
    assert inside["controller"] == "computedomain"
    assert "reconcileID" not in outside
    assert "controller" not in outside


def test_text_format_is_key_value(logger: logging.Logger) -> None:
    stream = io.StringIO()
    cdlog.configure_logging(log_format="text", stream=stream, logger=logger)
    with cdlog.bind(**cdlog.reconcile_fields("computedomain", "team", "cd")):
        logger.info("Created DaemonSet", extra={"count": 3, "empty": ""})
    line = stream.getvalue().rstrip("\n")
    assert line.startswith("ts=")
    assert ' level=info v=0 msg="Created DaemonSet" logger=computedomain.test.logsetup ' in line
    assert " ComputeDomain=team/cd " in line
    assert " count=3 " in line
    assert line.endswith(' empty=""')


def test_reconfiguring_replaces_our_handler(logger: logging.Logger) -> None:
    first, second = io.StringIO(), io.StringIO()
    cdlog.configure_logging(stream=first, logger=logger)
    cdlog.configure_logging(stream=second, logger=logger)
    logger.info("Once")
    assert first.getvalue() == ""
    assert len(lines(second)) == 1
    ours = [h for h in logger.handlers if isinstance(h.formatter, cdlog.JsonFormatter)]
    assert len(ours) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"log_format": "xml"}, "unknown log format"), ({"verbosity": -1}, "verbosity")],
)
def test_invalid_settings_are_refused(
    logger: logging.Logger, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        cdlog.configure_logging(logger=logger, **kwargs)
