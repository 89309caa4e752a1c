"""The restaurant agent with a booking system that takes 2 s: for the tests that interrupt a tool call and time the filler."""

from __future__ import annotations

import dataclasses
import time

from voice_agent import Agent
from voice_agent.agent.agent import load_agent
from voice_agent.agent.tools import Tool

BOOKING_S = 2.0

restaurant: Agent = load_agent("examples/restaurant/agent.py:agent")


def _slow(tool: Tool) -> Tool:
    def run(**arguments):
        time.sleep(BOOKING_S)
        return tool.function(**arguments)

    return dataclasses.replace(tool, function=run)


agent = dataclasses.replace(
    restaurant,
    tools=[_slow(t) if t.name == "book_table" else t for t in restaurant.tools],  # type: ignore[union-attr]
)
