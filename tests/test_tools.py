"""Tools: schemas from type hints and docstrings, argument checks, and how a call's outcome is reported."""

from __future__ import annotations

import asyncio
import enum
import json
import time
from typing import Literal

import pytest

from voice_agent.agent import Agent, CallContext, load_agent
from voice_agent.tools import as_tool, parse_arguments, parse_docstring, run_tool, tool


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
    assert json.loads(outcome.content) == {"error": "broken failed: ValueError: the database is locked"}
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
