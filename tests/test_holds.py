import asyncio

from voice_agent.holds import USER_HOLDS, Hold, Holds


async def flows(holds: Holds) -> bool:
    try:
        await asyncio.wait_for(holds.wait(), 0.01)
    except TimeoutError:
        return False
    return True


async def test_the_audio_flows_only_once_every_holder_let_go():
    holds = Holds()
    assert await flows(holds)
    assert holds.add(Hold.ONSET) is True
    assert holds.add(Hold.TURN) is False  # paused already
    assert holds.release(Hold.ONSET) is False  # the turn still holds it
    assert not await flows(holds) and holds
    assert holds.release(Hold.TURN) is True
    assert await flows(holds) and not holds


async def test_a_holder_released_twice_or_never_held_changes_nothing():
    holds = Holds([Hold.PREPARED])
    assert holds.release(Hold.TURN) is False
    assert not await flows(holds)
    assert holds.release(Hold.PREPARED) is True
    assert holds.release(Hold.PREPARED) is False
    assert await flows(holds)


async def test_a_hand_over_lets_no_frame_out_and_moves_only_what_is_held():
    holds = Holds()
    holds.hand_over(Hold.ONSET, Hold.TURN)
    assert not holds  # nothing held: nothing to take over
    holds.add(Hold.ONSET)
    holds.hand_over(Hold.ONSET, Hold.TURN)
    assert Hold.TURN in holds and Hold.ONSET not in holds
    assert holds.release(Hold.ONSET) is False and not await flows(holds)
    assert holds.release(USER_HOLDS) is True
