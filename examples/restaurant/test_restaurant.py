"""The restaurant example against a real SQLite file: the database rules, and the agent's tools as the model calls them."""

from __future__ import annotations

import asyncio
import datetime
import json
import sqlite3
import threading

import pytest

from voice_agent.agent.agent import load_agent
from voice_agent.agent.tools import run_tool

TUESDAY = datetime.date(2026, 11, 24)
MONDAY = datetime.date(2026, 11, 23)


@pytest.fixture
def agent(tmp_path, monkeypatch):
    monkeypatch.setenv("RESTAURANT_DB", str(tmp_path / "restaurant.db"))
    return load_agent("examples/restaurant/agent.py:agent")


@pytest.fixture
def restaurant(tmp_path):
    from bookings import Restaurant  # importable once load_agent has run, or from this folder

    return Restaurant(tmp_path / "db.sqlite")


def at(day: datetime.date, time: str) -> datetime.datetime:
    return datetime.datetime.combine(day, datetime.time.fromisoformat(time))


def test_opening_hours_and_free_tables(agent, restaurant):
    from bookings import BookingError

    assert restaurant.opening_hours(MONDAY) == "Closed on Mondays."
    assert restaurant.opening_hours(TUESDAY) == "Open on Tuesdays from 12:00 to 22:00."
    assert restaurant.free_tables(at(TUESDAY, "19:00"), 7) == [6]
    with pytest.raises(BookingError, match="closed on Mondays"):
        restaurant.free_tables(at(MONDAY, "19:00"), 2)
    with pytest.raises(BookingError, match="from 12:00 to 20:00"):
        restaurant.free_tables(at(TUESDAY, "21:00"), 2)


def test_a_table_is_held_for_two_hours_and_never_booked_twice(agent, restaurant):
    from bookings import BookingError

    first = restaurant.book("Ann", at(TUESDAY, "19:00"), 8)
    assert restaurant.free_tables(at(TUESDAY, "20:00"), 7) == []
    assert restaurant.free_tables(at(TUESDAY, "17:00"), 7) == [6]  # ends as the 19:00 booking starts
    with pytest.raises(BookingError, match="No table is free"):
        restaurant.book("Bo", at(TUESDAY, "17:30"), 8)
    assert restaurant.cancel(first.lower())
    assert not restaurant.cancel(first)
    assert restaurant.free_tables(at(TUESDAY, "20:00"), 7) == [6]


def test_concurrent_bookings_of_the_last_table_give_it_once(agent, restaurant):
    from bookings import BookingError

    outcomes: list[str] = []

    def book(name: str) -> None:
        try:
            restaurant.book(name, at(TUESDAY, "19:00"), 8)
            outcomes.append("booked")
        except BookingError:
            outcomes.append("full")

    threads = [threading.Thread(target=book, args=(f"guest {i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["booked"] + ["full"] * 5


async def test_the_tools_as_the_model_calls_them(agent, tmp_path):
    tools = {t.name: t for t in agent.tools}
    assert set(tools) == {"opening_hours", "check_availability", "book_table", "cancel_booking", "end_call"}
    assert tools["book_table"].side_effect and tools["cancel_booking"].side_effect
    assert not tools["check_availability"].side_effect

    async def call(tool_name: str, **arguments) -> str:
        outcome = await run_tool(tools[tool_name], json.dumps(arguments), None, timeout_s=5)
        return outcome.content

    assert await call("opening_hours", date="2026-11-24") == "Open on Tuesdays from 12:00 to 22:00."
    assert await call("check_availability", date="2026-11-24", time="19:30", party_size=4) == "A table is free."
    booked = await call("book_table", name="Ann", date="2026-11-24", time="19:30", party_size=4)
    assert booked.startswith("Booked for Ann, 4 people, Tuesday 24 November at 19:30. Reference ")
    reference = booked.rsplit(" ", 1)[-1].rstrip(".")
    rows = sqlite3.connect(tmp_path / "restaurant.db").execute("SELECT name, party_size, starts_at FROM bookings")
    assert rows.fetchall() == [("Ann", 4, "2026-11-24T19:30:00")]
    failed = json.loads(await call("book_table", name="Bo", date="next week", time="19:30", party_size=2))
    assert "I need the day as a date" in failed["error"]
    assert await call("cancel_booking", reference=reference) == "Cancelled."


def test_the_start_hook_adds_the_date_and_greets_by_name(agent):
    context = agent.context("s", "twilio", {"custom_parameters": {"caller_name": "Ann"}}, "CA1")
    asyncio.run(_start(agent, context))
    assert "Today is " in context.instructions and datetime.date.today().isoformat() in context.instructions
    assert context.greeting == "Hello Ann, Luigi's, how can I help?"


async def _start(agent, context):
    from voice_agent.agent.agent import call_hook

    await call_hook(agent.on_session_start, context)
