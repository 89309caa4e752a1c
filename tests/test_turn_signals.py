import asyncio

import numpy as np

from voice_agent.turn_taking.turn import Completeness
from voice_agent.turn_taking.turn_signals import PauseSignals


class SlowLLM:
    def __init__(self, logprob, delay):
        self.logprob, self.delay, self.asked = logprob, delay, []

    async def end_of_turn_logprob(self, messages, *, answering=False):
        self.asked.append(messages)
        await asyncio.sleep(self.delay)
        return self.logprob


class FailingLLM:
    async def end_of_turn_logprob(self, messages, *, answering=False):
        raise RuntimeError("no logits")


class SmartTurnStub:
    async def complete_probability(self, audio):
        return 0.2


MESSAGES = [{"role": "user", "content": "What time do you close?"}]
AUDIO = np.zeros(16000, dtype=np.float32)


async def test_a_signal_counts_only_once_it_has_arrived():
    llm = SlowLLM(-0.1, delay=0.05)
    signals = PauseSignals("What time do you close?", None, llm, MESSAGES, SmartTurnStub(), AUDIO)
    assert signals.current().end_of_turn_logprob is None  # never waited for
    await asyncio.sleep(0.01)
    assert signals.current().audio_end_probability == 0.2
    await asyncio.sleep(0.08)
    assert signals.current().end_of_turn_logprob == -0.1
    assert signals.llm_ms is not None and signals.llm_ms >= 50
    assert llm.asked == [MESSAGES]


async def test_the_dialogue_state_reads_the_agents_last_words():
    signals = PauseSignals("It's 555.", "Sure. What's your phone number?", None, MESSAGES, None, AUDIO)
    assert signals.current().answer is Completeness.INCOMPLETE
    assert (
        PauseSignals("Yes.", "Would you like a dessert?", None, MESSAGES, None, AUDIO).answer is Completeness.COMPLETE
    )


async def test_a_failed_or_cancelled_signal_is_left_out():
    failed = PauseSignals("Hello.", None, FailingLLM(), MESSAGES, None, AUDIO)
    await asyncio.sleep(0.01)
    assert failed.current().end_of_turn_logprob is None
    cancelled = PauseSignals("Hello.", None, SlowLLM(-0.1, delay=1), MESSAGES, None, AUDIO)
    cancelled.cancel()
    await asyncio.gather(*cancelled.tasks(), return_exceptions=True)
    assert cancelled.current().end_of_turn_logprob is None
