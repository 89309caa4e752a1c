"""A restaurant's booking line: opening hours, free tables, bookings and cancellations in SQLite.

Serve it with an LLM that can call tools, e.g. a model behind ``vllm serve
--enable-auto-tool-choice --tool-call-parser hermes``:

    voice-agent serve --agent examples/restaurant/agent.py:agent --llm openai --llm-url http://127.0.0.1:8001/v1

The database is ``RESTAURANT_DB`` (default: ``restaurant.db`` beside this file),
created with its opening hours and tables on first use. See README.md here.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from bookings import WEEKDAYS, BookingError, Restaurant  # this file's folder is importable, as for a script

from voice_agent import Agent, CallContext, tool
from voice_agent.agent.call_control import end_call

restaurant = Restaurant(os.environ.get("RESTAURANT_DB") or Path(__file__).with_name("restaurant.db"))

INSTRUCTIONS = (
    "You answer the phone for Luigi's, a small Italian restaurant. You can tell callers the opening hours, "
    "check for a free table, book one and cancel a booking, using your tools. Before booking, get the "
    "guest's name, the day, the time and how many people. Never invent a booking or a reference: only a "
    "tool books. Answer in one or two short spoken sentences, with no lists or markdown. "
    "When the caller says goodbye, call end_call and say goodbye."
)


def _date(text: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(text.strip())
    except ValueError:
        raise BookingError(f"I need the day as a date, like {datetime.date.today():%Y-%m-%d}.") from None


def _when(date: str, time: str) -> datetime.datetime:
    try:
        at = datetime.time.fromisoformat(time.strip())
    except ValueError:
        raise BookingError("I need the time as hours and minutes, like 19:30.") from None
    return datetime.datetime.combine(_date(date), at)


@tool
def opening_hours(date: str) -> str:
    """When the restaurant is open on a given day.

    Args:
        date: The day, as YYYY-MM-DD.
    """
    return restaurant.opening_hours(_date(date))


@tool
def check_availability(date: str, time: str, party_size: int) -> str:
    """Whether a table is free for a party at a given day and time.

    Args:
        date: The day, as YYYY-MM-DD.
        time: The time, as HH:MM on a 24-hour clock.
        party_size: How many people.
    """
    free = restaurant.free_tables(_when(date, time), party_size)
    return "A table is free." if free else "No table is free for that party at that time."


@tool(side_effect=True)
def book_table(name: str, date: str, time: str, party_size: int) -> str:
    """Book a table. Only call this once the guest has confirmed name, day, time and party size.

    Args:
        name: The guest's name.
        date: The day, as YYYY-MM-DD.
        time: The time, as HH:MM on a 24-hour clock.
        party_size: How many people.
    """
    starts_at = _when(date, time)
    reference = restaurant.book(name, starts_at, party_size)
    # Written to be read out: "Tuesday 24 November", not an ISO date.
    return (
        f"Booked for {name}, {party_size} people, {WEEKDAYS[starts_at.weekday()]} {starts_at.day} "
        f"{starts_at:%B} at {starts_at:%H:%M}. Reference {reference}."
    )


@tool(side_effect=True)
def cancel_booking(reference: str) -> str:
    """Cancel a booking by its reference.

    Args:
        reference: The booking reference the guest was given.
    """
    return "Cancelled." if restaurant.cancel(reference) else "No open booking has that reference."


def start(context: CallContext) -> None:
    """Tell the model today's date, and greet a caller by name when the call carries one."""
    today = datetime.date.today()
    context.instructions += f" Today is {WEEKDAYS[today.weekday()]}, {today:%Y-%m-%d}."
    caller = context.options.get("caller_name") or context.options.get("custom_parameters", {}).get("caller_name")
    if isinstance(caller, str) and caller.strip():
        context.greeting = f"Hello {caller.strip()}, Luigi's, how can I help?"


agent = Agent(
    instructions=INSTRUCTIONS,
    greeting="Luigi's, how can I help?",
    tools=[opening_hours, check_availability, book_table, cancel_booking, end_call],
    on_session_start=start,
)
