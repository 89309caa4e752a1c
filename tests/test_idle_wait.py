import asyncio

from voice_agent.agent.idle_wait import IdleWait
from voice_agent.protocols.events import CANCELLED, COMPLETED, FAILED, AgentState, ResponseEnded, SpeechStarted


def wait(timeout_ms: int | None = 50) -> tuple[IdleWait, list[str]]:
    fired: list[str] = []
    return IdleWait(lambda: timeout_ms, lambda: fired.append("idle")), fired


async def test_an_answer_heard_to_its_end_starts_the_wait_and_the_state_change_after_it_does_not_end_it():
    for status in (COMPLETED, FAILED):
        idle, fired = wait()
        idle.see(ResponseEnded(1, status))
        idle.see(AgentState("listening"))  # the floor's state change that follows every end
        await asyncio.sleep(0.15)
        assert fired == ["idle"]


async def test_a_cancelled_answer_or_no_timeout_starts_no_wait():
    idle, fired = wait()
    idle.see(ResponseEnded(1, CANCELLED, "turn_detected"))
    off, off_fired = wait(None)
    off.see(ResponseEnded(1, COMPLETED))
    await asyncio.sleep(0.15)
    assert fired == [] and off_fired == []


async def test_a_new_user_turn_or_answer_ends_the_wait():
    for ends in (SpeechStarted(2, 1000), AgentState("thinking"), AgentState("speaking")):
        idle, fired = wait()
        idle.see(ResponseEnded(1, COMPLETED))
        idle.see(ends)
        await asyncio.sleep(0.15)
        assert fired == [], ends
    idle, fired = wait()
    idle.see(ResponseEnded(1, COMPLETED))
    idle.stop()  # the session closes
    await asyncio.sleep(0.15)
    assert fired == []
