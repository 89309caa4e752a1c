"""An agent whose end-of-session hook never finishes: the session's slot must come free at the hook's timeout."""

from __future__ import annotations

import asyncio

from voice_agent import Agent


async def never_done(context, report) -> None:
    await asyncio.sleep(3600)


agent = Agent(instructions="Be brief.", on_session_end=never_done)
