"""Tools: schemas from type hints and docstrings, argument checks, and how a call's outcome is reported."""

from __future__ import annotations

import asyncio
import enum
import json
import time
from typing import Literal

import pytest

from voice_agent.agent.agent import Agent, CallContext, load_agent
from voice_agent.agent.tools import (
    MAX_RESULT_CHARS,
    RESULT_CUT,
    ToolError,
    as_tool,
    parse_arguments,
    parse_docstring,
    run_tool,
    tool,
)


class Seating(enum.Enum):
    INDOOR = "indoor"
    TERRACE = "terrace"


@tool(side_effect=True)
def book_table(
    context: CallContext,
    name: str,
    party_size: int,
    time: str,
    seating: Seating = Seating.INDOOR,
    notes: str | None = None,
    allergies: list[str] | None = None,
    day: Literal["today", "tomorrow"] = "today",
) -> dict:
    """Book a table for a party.

    Args:
        name: The guest's name.
        party_size: How many people,
            children included.
        time: The time, like 19:30.
        seating: Where to sit.

    Returns:
        The booking.
    """
    return {"name": name, "party_size": party_size}


def test_the_schema_comes_from_the_type_hints_and_the_docstring():
    assert book_table.side_effect
    assert book_table.context_parameter == "context"
    assert book_table.schema() == {
        "type": "function",
        "function": {
            "name": "book_table",
            "description": "Book a table for a party.",
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The guest's name."},
                    "party_size": {"type": "integer", "description": "How many people, children included."},
                    "time": {"type": "string", "description": "The time, like 19:30."},
                    "seating": {"type": "string", "enum": ["indoor", "terrace"], "description": "Where to sit."},
                    "notes": {"type": "string", "default": None},
                    "allergies": {"type": "array", "items": {"type": "string"}, "default": None},
                    "day": {"type": "string", "enum": ["today", "tomorrow"], "default": "today"},
                },
                "required": ["name", "party_size", "time"],
            },
        },
    }
    json.dumps(book_table.schema())  # what goes into the request


def test_a_plain_function_becomes_a_tool_with_sphinx_docstring():
    async def opening_hours(day: str, exact: bool = False) -> str:
        """When the restaurant is open.

        :param day: A day of the week.
        """
        return "noon to ten"

    made = as_tool(opening_hours)
    assert made.name == "opening_hours" and not made.side_effect
    assert made.parameters["properties"]["day"] == {"type": "string", "description": "A day of the week."}
    assert made.parameters["properties"]["exact"] == {"type": "boolean", "default": False}
    assert made.parameters["required"] == ["day"]


def test_docstring_without_sections():
    assert parse_docstring("Say hello.\n\nMore text.") == ("Say hello.", {})


def test_types_a_model_cannot_be_told_about_are_refused():
    def bad(when: time.struct_time) -> None: ...

    with pytest.raises(TypeError, match="cannot be described"):
        as_tool(bad)

    def variadic(*names: str) -> None: ...

    with pytest.raises(TypeError, match="args"):
        as_tool(variadic)


@pytest.mark.parametrize(
    "arguments, problem",
    [
        ("{", "not valid JSON"),
        ("[1]", "must be a JSON object"),
        ('{"name": "Ann", "party_size": 2}', "missing argument"),
        ('{"name": "Ann", "party_size": "two", "time": "19:00"}', "expected integer"),
        ('{"name": "Ann", "party_size": true, "time": "19:00"}', "boolean"),
        ('{"name": "Ann", "party_size": 2, "time": "19:00", "day": "monday"}', "not one of"),
        ('{"name": "Ann", "party_size": 2, "time": "19:00", "price": 3}', "unknown argument"),
    ],
)
async def test_bad_arguments_become_a_result_the_model_can_read(arguments, problem):
    outcome = await run_tool(book_table, arguments, context=None, timeout_s=1)
    assert not outcome.ok
    assert problem in json.loads(outcome.content)["error"]


def test_good_arguments_pass():
    values = parse_arguments(book_table, '{"name": "Ann", "party_size": 2.0, "time": "19:00", "notes": null}')
    assert values["party_size"] == 2.0


async def test_a_sync_tool_runs_off_the_event_loop_and_gets_the_context():
    seen = {}

    def where(context: CallContext, city: str) -> str:
        seen["thread_loop"] = _running_loop()
        seen["context"] = context
        return f"near {city}"

    context = object()
    outcome = await run_tool(as_tool(where), '{"city": "Paris"}', context, timeout_s=1)
    assert outcome.ok and outcome.content == "near Paris"
    assert seen == {"thread_loop": None, "context": context}


def _running_loop():
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def test_errors_and_timeouts_become_results():
    def broken() -> str:
        raise ValueError("the database is locked")

    async def slow() -> str:
        await asyncio.sleep(5)
        return "late"

    outcome = await run_tool(as_tool(broken), "{}", None, timeout_s=1)
    assert not outcome.ok
    # The exception's text may hold a path or a host: it stays in the log, and the model reads only this.
    assert json.loads(outcome.content) == {"error": "broken failed"}
    started = time.perf_counter()
    outcome = await run_tool(as_tool(slow), "", None, timeout_s=0.2)
    assert time.perf_counter() - started < 1
    assert "did not finish within 0.2 s" in json.loads(outcome.content)["error"]


async def test_results_that_are_not_text_are_sent_as_json():
    def table() -> dict:
        return {"free": [19, 20], "room": "terrace"}

    outcome = await run_tool(as_tool(table), "{}", None, timeout_s=1)
    assert json.loads(outcome.content) == {"free": [19, 20], "room": "terrace"}


def test_agent_checks_tool_names_and_makes_contexts():
    def a() -> None:
        """A."""

    with pytest.raises(ValueError, match="share the name"):
        Agent(tools=[a, a])
    agent = Agent(instructions="Be brief.", greeting="Hi.", tools=[a])
    context = agent.context("s1", "ws", {"x": 1}, None)
    context.tools.clear()  # per session: the agent keeps its own
    assert len(agent.tools) == 1 and context.instructions == "Be brief." and context.greeting == "Hi."


def test_load_agent_from_a_file_and_a_module(tmp_path, monkeypatch):
    (tmp_path / "my_agent.py").write_text(
        "from voice_agent import Agent\nagent = Agent(instructions='From a file.')\ndef make():\n"
        "    return Agent(instructions='From a factory.')\nnot_an_agent = 3\n"
    )
    assert load_agent(f"{tmp_path}/my_agent.py:agent").instructions == "From a file."
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_agent("my_agent:make").instructions == "From a factory."
    with pytest.raises(ValueError, match="not a voice_agent.Agent"):
        load_agent("my_agent:not_an_agent")
    with pytest.raises(ValueError, match="MODULE_OR_FILE:NAME"):
        load_agent("my_agent")
    with pytest.raises(ValueError, match="no file"):
        load_agent(f"{tmp_path}/missing.py:agent")


def test_serve_names_a_bad_agent_spec(capsys):
    from voice_agent.cli import main

    assert main(["serve", "--agent", "examples/restaurant/agent.py:no_such_agent"]) == 2
    assert "examples/restaurant/agent.py has no no_such_agent" in capsys.readouterr().err


async def test_a_tool_error_is_told_to_the_model_and_any_other_exception_only_to_the_log(caplog):
    def full() -> str:
        raise ToolError("No table is free at eight.")

    def leaky() -> str:
        raise OSError("connection to db.internal:5432 refused")

    assert json.loads((await run_tool(as_tool(full), "{}", None, 1)).content) == {
        "error": "full failed: No table is free at eight."
    }
    content = (await run_tool(as_tool(leaky), "{}", None, 1)).content
    assert "db.internal" not in content and "OSError" not in content
    assert "db.internal:5432" in caplog.text  # the operator sees it


async def test_a_long_result_is_cut_with_a_mark():
    def menu() -> str:
        return "pasta " * 5000

    content = (await run_tool(as_tool(menu), "{}", None, 1)).content
    assert len(content) == MAX_RESULT_CHARS + len(RESULT_CUT) and content.endswith(RESULT_CUT)


class Gauge:
    """A sync tool that sleeps, and counts how many of its calls run at once."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.running = 0
        self.most = 0
        self.started: list[float] = []
        self._lock = __import__("threading").Lock()

    def tool(self):
        def wait() -> str:
            """Waits."""
            with self._lock:
                self.running += 1
                self.most = max(self.most, self.running)
                self.started.append(time.perf_counter())
            time.sleep(self.seconds)
            with self._lock:
                self.running -= 1
            return "done"

        return as_tool(wait)


async def test_a_sessions_share_bounds_its_calls_at_once_and_time_waiting_is_not_charged():
    gauge = Gauge(0.3)
    share = asyncio.Semaphore(2)
    # Four calls of 0.3 s each, two at a time: the last two end 0.6 s after they were asked for, and still
    # within their 0.5 s timeout, which counts from when each started.
    outcomes = await asyncio.gather(*(run_tool(gauge.tool(), "{}", None, 0.5, share) for _ in range(4)))
    assert [o.content for o in outcomes] == ["done"] * 4
    assert gauge.most == 2


async def test_a_call_past_its_timeout_keeps_its_share_until_its_thread_is_free():
    gauge = Gauge(0.6)
    share = asyncio.Semaphore(1)
    first = await run_tool(gauge.tool(), "{}", None, 0.1, share)
    assert "did not finish within 0.1 s" in first.content
    # The first call's thread is still busy: the next one of this session waits for it, not for a timeout's end.
    second = await run_tool(gauge.tool(), "{}", None, 1.0, share)
    assert second.content == "done"
    assert gauge.most == 1 and gauge.started[1] - gauge.started[0] >= 0.55


async def test_a_call_that_cannot_start_within_its_timeout_is_not_run():
    gauge = Gauge(0.5)
    share = asyncio.Semaphore(1)
    busy = asyncio.ensure_future(run_tool(gauge.tool(), "{}", None, 1.0, share))
    await asyncio.sleep(0.05)
    waiting = await run_tool(gauge.tool(), "{}", None, 0.2, share)
    assert json.loads(waiting.content) == {"error": "wait was not called: too many tool calls at once"}
    assert (await busy).content == "done"
    assert len(gauge.started) == 1


async def test_one_sessions_slow_calls_do_not_delay_another_sessions_instant_tool():
    """The attack of issue 36: 32 slow calls from one session; the threads are shared, the shares are not."""
    slow = Gauge(0.5)
    attacker = asyncio.Semaphore(2)
    flood = [asyncio.ensure_future(run_tool(slow.tool(), "{}", None, 10.0, attacker)) for _ in range(32)]
    await asyncio.sleep(0.1)

    def instant() -> str:
        return "ok"

    started = time.perf_counter()
    outcome = await run_tool(as_tool(instant), "{}", None, 10.0, asyncio.Semaphore(2))
    took = time.perf_counter() - started
    assert outcome.content == "ok" and took < 0.3, took
    assert slow.most == 2
    for call in flood:
        call.cancel()
    await asyncio.gather(*flood, return_exceptions=True)
