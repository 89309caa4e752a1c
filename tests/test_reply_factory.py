"""Each answer's Reply as the factory builds it: limits, output rate and its metrics."""

from __future__ import annotations

from tests.test_session import EnergyVAD, FakeLLM, FakeSTT, FakeTTS
from voice_agent.agent.reply_factory import ReplyFactory, TurnMetrics
from voice_agent.config import Settings
from voice_agent.engines.llm.scripted import ScriptedLLM
from voice_agent.engines.loader import Engines
from voice_agent.protocols.events import AgentAudio, Metrics

ANSWER = "One two three four. Five six seven eight. Nine ten eleven twelve."


def factory(events: list, settings: Settings, rate: list[int]) -> tuple[ReplyFactory, FakeLLM]:
    llm = FakeLLM(ANSWER, delay=0)
    engines = Engines(vad=EnergyVAD(), stt=FakeSTT(), llm=llm, tts=FakeTTS())
    return ReplyFactory(engines, lambda: settings, lambda: rate[0], events.append), llm


def settings(**values) -> Settings:
    return Settings(output_lead_ms=2000, first_chunk_min_words=3, **values)


async def test_a_client_token_limit_cuts_answers_but_not_fixed_words():
    events: list = []
    replies, llm = factory(events, settings(answer_max_sentences=0), [16000])
    replies.max_output_tokens = 3
    answer = replies.new(1, "Count.", llm, [], None)
    await answer.run()
    assert answer.text == "One two three"
    greeting = replies.new(0, "", ScriptedLLM("Hello there, how can I help?"), [], None)
    await greeting.run()
    assert greeting.text == "Hello there, how can I help?"
    own_limit = replies.new(2, "Count.", llm, [], None, max_tokens=5)  # response.create's own limit wins
    await own_limit.run()
    assert own_limit.text == "One two three four. Five"


async def test_the_sentence_limit_holds_for_answers_only():
    events: list = []
    replies, llm = factory(events, settings(answer_max_sentences=1), [16000])
    answer = replies.new(1, "Count.", llm, [], None)
    await answer.run()
    assert answer.text == "One two three four."
    fixed = replies.new(0, "", ScriptedLLM("One. Two. Three."), [], None)
    await fixed.run()
    assert fixed.text == "One. Two. Three."


async def test_settings_and_rate_are_read_per_reply_and_metrics_go_out_on_the_first_audio():
    events: list = []
    rate = [16000]
    replies, llm = factory(events, settings(answer_max_sentences=1), rate)
    rate[0] = 8000  # a client changed its rate after the factory was made
    await replies.new(7, "Count.", llm, [], TurnMetrics(7)).run()
    frames = [e for e in events if isinstance(e, AgentAudio)]
    assert frames and all(len(f.samples) == 160 for f in frames)  # 20 ms at 8 kHz
    metrics = [e for e in events if isinstance(e, Metrics)]
    assert len(metrics) == 1 and metrics[0].values["turn"] == 7
    assert events.index(metrics[0]) > events.index(frames[0])
    await replies.new(8, "", ScriptedLLM("Hi."), [], None).run()
    assert len([e for e in events if isinstance(e, Metrics)]) == 1  # fixed words report no turn metrics
