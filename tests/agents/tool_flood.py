"""An agent with a slow lookup and an instant one: for the attack of issue 36, where one session's model asks for
32 slow calls at once and another session's instant call must not wait behind them."""

from __future__ import annotations

import time

from voice_agent import Agent, tool

SLOW_S = 2.0


@tool
def slow_lookup(n: int) -> str:
    """Looks up record n in a slow system.

    Args:
        n: The record.
    """
    time.sleep(SLOW_S)
    return f"record {n}"


@tool
def clock() -> str:
    """The time now."""
    return "noon"


agent = Agent(instructions="You look things up.", tools=[slow_lookup, clock], fillers=())
