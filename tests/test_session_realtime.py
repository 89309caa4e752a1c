"""The session's hooks for the Realtime protocol, with fake engines: turn modes, responses on request, truncation."""

from __future__ import annotations

import asyncio

from tests.test_session import BrokenLLM, Harness, quiet, tone
from voice_agent.protocols.events import (
    MANUAL,
    SEMANTIC_VAD,
    SERVER_VAD,
    AgentAudio,
    Error,
    HistoryMessage,
    HistoryMessageAdded,
    IdleTimeout,
    InputClear,
    InputCleared,
    InputCommit,
    ItemDelete,
    ItemDeleted,
    ResponseCancel,
    ResponseEnded,
    ResponseRequest,
    ResponseStarted,
    SessionConfig,
    SessionUpdate,
    SpeechStarted,
    TextReceived,
    Transcript,
    Truncated,
    TruncateRequest,
    TurnCommitted,
    TurnDetection,
    TurnIgnored,
    UserText,
    UserTextAdded,
)
from voice_agent.session import Session


def lifecycle(h: Harness) -> list[str]:
    """The turn and response events in order, with the user's final transcripts."""
    kinds = (SpeechStarted, TurnCommitted, TurnIgnored, ResponseStarted, ResponseEnded, InputCleared, UserTextAdded)
    names = []
    for e in h.events:
        if isinstance(e, kinds):
            names.append(type(e).__name__ + (f":{e.status}" if isinstance(e, ResponseEnded) else ""))
        elif isinstance(e, Transcript) and e.role == "user" and e.final:
            names.append("UserFinal")
    return names


async def test_a_spoken_turn_reports_speech_commit_and_the_response_around_it():
    h = Harness()
    await h.feed(tone(0.5), realtime=False)
    await h.feed(quiet(0.4))
    await h.until(lambda: h.of(ResponseEnded))
    assert lifecycle(h) == ["SpeechStarted", "TurnCommitted", "UserFinal", "ResponseStarted", "ResponseEnded:completed"]
    started, committed = h.of(SpeechStarted)[0], h.of(TurnCommitted)[0]
    assert started.turn == committed.turn and 0 <= started.audio_start_ms < committed.audio_end_ms
    assert committed.audio_end_ms >= 500
    first_audio = next(i for i, e in enumerate(h.events) if isinstance(e, AgentAudio))
    assert h.events.index(h.of(ResponseStarted)[0]) < first_audio
    await h.session.close()


async def test_session_update_applies_to_this_session_only_and_reports_the_result():
    h = Harness(end_silence_complete_ms=350, end_silence_ms=600, end_silence_incomplete_ms=2000)
    other = Session(h.session.engines, h.settings, [].append, "other")
    h.session.handle(
        SessionUpdate(
            instructions="Be a pirate.",
            turn_detection=TurnDetection(SERVER_VAD, silence_ms=900, prefix_padding_ms=100, threshold=0.7),
            max_output_tokens=40,
        )
    )
    (config,) = h.of(SessionConfig)
    assert config.instructions == "Be a pirate." and config.max_output_tokens == 40
    assert (config.turn_detection.silence_ms, config.turn_detection.prefix_padding_ms) == (900, 100)
    assert config.turn_detection.threshold == 0.7
    s = h.session.settings
    assert (s.end_silence_complete_ms, s.end_silence_ms, s.end_silence_incomplete_ms, s.vad_threshold) == (
        350,
        900,
        2000,
        0.7,
    )
    h.session.handle(SessionUpdate(turn_detection=TurnDetection(SEMANTIC_VAD, eagerness="high")))
    s = h.session.settings
    assert (s.end_silence_complete_ms, s.end_silence_ms, s.end_silence_incomplete_ms) == (210, 360, 1200)
    # Nothing leaked: not into the server's settings, not into another session.
    assert (h.settings.end_silence_ms, h.settings.vad_threshold, h.settings.system_prompt) == (
        600,
        0.5,
        other.conversation.system_prompt,
    )
    assert other.settings is h.settings and other.conversation.system_prompt != "Be a pirate."
    await h.session.close()
    await other.close()


async def test_an_unknown_voice_is_an_error_and_the_voice_stays():
    h = Harness()
    h.session.handle(SessionUpdate(event_id="v1", voice="alloy", instructions="Hi."))
    (error,) = h.of(Error)
    assert (error.code, error.event_id) == ("invalid_voice", "v1")
    (config,) = h.of(SessionConfig)
    assert config.voice == h.session.control.voice and config.instructions == "Hi."
    await h.session.close()


async def test_with_turn_detection_null_the_client_commits_and_asks_for_the_answer():
    h = Harness()
    h.session.handle(SessionUpdate(turn_detection=TurnDetection(MANUAL, create_response=False)))
    await h.feed(tone(0.5), realtime=False)
    await h.feed(quiet(0.5))
    assert lifecycle(h) == [] and not h.llm.requests  # no VAD, no answer
    h.session.handle(InputCommit("c1"))
    h.session.handle(ResponseRequest("r1", instructions="Answer in French."))
    await h.until(lambda: h.of(ResponseEnded))
    assert lifecycle(h) == ["TurnCommitted", "UserFinal", "ResponseStarted", "ResponseEnded:completed"]
    assert h.finals("user") == ["word word word word word."]
    assert h.llm.requests[0][0] == {"role": "system", "content": "Answer in French."}
    assert h.llm.requests[0][-1] == {"role": "user", "content": "word word word word word."}
    assert h.session.history[0] == {"role": "user", "content": "word word word word word."}
    # An empty buffer cannot be committed; a cleared one is empty.
    await h.feed(tone(0.3), realtime=False)
    h.session.handle(InputClear())
    h.session.handle(InputCommit("c2"))
    assert [(e.code, e.event_id) for e in h.of(Error)] == [("input_audio_buffer_commit_empty", "c2")]
    await h.session.close()


async def test_text_input_is_answered_on_request_and_a_second_request_is_refused_while_one_runs():
    h = Harness()
    h.session.handle(UserText("Hello there.", "t1"))
    assert h.of(UserTextAdded) == [UserTextAdded("Hello there.")] and not h.llm.requests
    h.session.handle(ResponseRequest("r1"))
    h.session.handle(ResponseRequest("r2"))
    await h.until(lambda: h.of(ResponseEnded))
    assert [(e.code, e.event_id) for e in h.of(Error)] == [("conversation_already_has_active_response", "r2")]
    assert len(h.of(ResponseStarted)) == 1 and h.of(ResponseEnded)[0].status == "completed"
    assert h.llm.requests[0][-1] == {"role": "user", "content": "Hello there."}
    await h.session.close()


async def test_create_response_false_transcribes_the_turn_and_waits_for_the_request():
    h = Harness()
    h.session.handle(SessionUpdate(turn_detection=TurnDetection(SERVER_VAD, create_response=False)))
    await h.feed(tone(0.5), realtime=False)
    await h.feed(quiet(0.5))
    await h.until(lambda: h.finals("user"))
    await asyncio.sleep(0.1)
    assert not h.llm.requests  # no answer prepared or spoken
    h.session.handle(ResponseRequest())
    await h.until(lambda: h.of(ResponseEnded))
    assert h.llm.requests[0][-1] == {"role": "user", "content": "word word word word word."}
    await h.session.close()


async def test_response_cancel_stops_the_answer_and_says_so():
    h = Harness(answer=" ".join(f"w{i}." for i in range(40)))
    h.session.handle(ResponseCancel("c0"))
    assert [(e.code, e.event_id) for e in h.of(Error)] == [("response_cancel_not_active", "c0")]
    h.session.handle(UserText("Talk."))
    h.session.handle(ResponseRequest())
    await h.until(lambda: len(h.of(AgentAudio)) > 10)
    h.session.handle(ResponseCancel("c1"))
    await h.until(lambda: h.of(ResponseEnded))
    (ended,) = h.of(ResponseEnded)
    assert (ended.status, ended.reason) == ("cancelled", "client_cancelled")
    sent = len(h.of(AgentAudio))
    await asyncio.sleep(0.2)
    assert len(h.of(AgentAudio)) == sent
    await h.session.close()


async def test_the_cancel_reason_belongs_to_the_answer_that_was_cancelled():
    """A client's response.cancel once does not make a later answer, cut by a typed turn, "client_cancelled"."""
    h = Harness(answer=" ".join(f"w{i}." for i in range(40)))
    h.session.handle(UserText("Talk."))
    h.session.handle(ResponseRequest())
    await h.until(lambda: len(h.of(AgentAudio)) > 5)
    h.session.handle(ResponseCancel("c1"))
    await h.until(lambda: h.of(ResponseEnded))
    h.session.handle(TextReceived("Talk again."))
    await h.until(lambda: len(h.of(ResponseStarted)) == 2 and len(h.of(AgentAudio)) > 15)
    h.session.handle(TextReceived("Stop."))  # a typed turn interrupts the second answer
    await h.until(lambda: len(h.of(ResponseEnded)) == 2)
    assert [(e.status, e.reason) for e in h.of(ResponseEnded)] == [
        ("cancelled", "client_cancelled"),
        ("cancelled", "turn_detected"),
    ]
    await h.session.close()


async def test_barge_in_is_reported_as_speech_started_and_a_cancelled_response():
    h = Harness(answer=" ".join(f"w{i}." for i in range(60)), barge_in_min_speech_ms=200)
    await h.feed(tone(0.5), realtime=False)
    await h.feed(quiet(0.3))
    await h.until(lambda: h.of(AgentAudio))
    await h.feed(quiet(0.3))
    h.stt.text = "Stop right there."
    await h.feed(tone(0.6))
    await h.until(lambda: h.of(ResponseEnded))
    assert lifecycle(h)[:6] == [
        "SpeechStarted",
        "TurnCommitted",
        "UserFinal",
        "ResponseStarted",
        "SpeechStarted",
        "ResponseEnded:cancelled",
    ]
    assert h.of(ResponseEnded)[0].reason == "turn_detected"
    # Ended the moment the agent stopped, not once its stages wound down.
    interrupted_at = h.events.index(h.of(SpeechStarted)[1])
    assert [type(e).__name__ for e in h.events[interrupted_at + 1 : interrupted_at + 4]] == [
        "Clear",
        "Transcript",
        "ResponseEnded",
    ]
    await h.session.close()


async def test_a_backchannel_over_the_agent_is_not_reported_at_all():
    h = Harness(answer=" ".join(f"w{i}." for i in range(30)), barge_in_min_speech_ms=100, barge_in_check_ms=200)
    await h.feed(tone(0.5), realtime=False)
    await h.feed(quiet(0.3))
    await h.until(lambda: h.of(AgentAudio))
    h.stt.text = "Mm-hmm."
    await h.feed(tone(0.3))
    await h.feed(quiet(0.5))
    await h.until(lambda: h.of(ResponseEnded), timeout=10)
    assert lifecycle(h) == ["SpeechStarted", "TurnCommitted", "UserFinal", "ResponseStarted", "ResponseEnded:completed"]
    await h.session.close()


async def test_truncate_keeps_only_the_words_played_and_applies_to_the_next_prompt():
    h = Harness(answer="One two three four. Five six seven eight.")
    h.session.handle(UserText("Count."))
    h.session.handle(ResponseRequest())
    await h.until(lambda: h.of(ResponseEnded))
    number = h.of(ResponseStarted)[0].response
    h.session.handle(TruncateRequest(number, 9999, "too_far"))
    assert [(e.code, e.event_id) for e in h.of(Error)] == [("invalid_value", "too_far")]
    h.session.handle(TruncateRequest(number, 350))  # FakeTTS: 100 ms a word
    (truncated,) = h.of(Truncated)
    assert truncated.text == "One two three"
    assert h.session.history[-1] == {"role": "assistant", "content": "One two three"}
    h.session.handle(UserText("Go on."))
    h.session.handle(ResponseRequest())
    await h.until(lambda: len(h.of(ResponseEnded)) == 2)
    assert h.llm.requests[1][-2] == {"role": "assistant", "content": "One two three"}
    await h.session.close()


async def test_max_output_tokens_stops_the_llm_stream():
    h = Harness(answer="One two three four five six seven eight.")
    h.session.handle(SessionUpdate(max_output_tokens=3))
    h.session.handle(UserText("Count."))
    h.session.handle(ResponseRequest())
    await h.until(lambda: h.of(ResponseEnded))
    assert h.session.history[-1]["content"] == "One two three"
    h.session.handle(UserText("Again."))
    h.session.handle(ResponseRequest(max_output_tokens=5))
    await h.until(lambda: len(h.of(ResponseEnded)) == 2)
    assert h.session.history[-1]["content"] == "One two three four five"
    assert h.llm.closed == 2
    await h.session.close()


async def test_a_turn_merged_into_the_next_is_reported_so():
    h = Harness()
    h.llm.delay = 0.3  # the agent is slow to start
    await h.feed(tone(0.3), realtime=False)
    await h.feed(quiet(0.3))
    await h.until(lambda: h.llm.requests)
    await h.feed(tone(0.3))  # the user goes on before any audio
    await h.feed(quiet(0.3))
    h.llm.delay = 0.001
    await h.until(lambda: h.finals("agent"))
    first, second = h.of(SpeechStarted)
    assert h.of(TurnIgnored) == [TurnIgnored(first.turn, merged=True)]
    # The answer to the first part was playing (held): it ends right after the new turn is told.
    assert lifecycle(h)[:7] == [
        "SpeechStarted",
        "TurnCommitted",
        "UserFinal",
        "ResponseStarted",
        "TurnIgnored",
        "SpeechStarted",
        "ResponseEnded:cancelled",
    ]
    assert [e.turn for e in h.of(TurnCommitted)] == [first.turn, second.turn]
    assert second.audio_start_ms == first.audio_start_ms  # one turn from the first word
    await h.session.close()


async def test_text_typed_before_a_spoken_turn_is_asked_with_it():
    h = Harness()
    h.session.handle(UserText("My name is Ann."))
    await h.feed(tone(0.3), realtime=False)
    await h.feed(quiet(0.4))
    await h.until(lambda: h.of(ResponseEnded))
    assert h.llm.requests[-1][-1] == {"role": "user", "content": "My name is Ann. word word word."}
    await h.session.close()


async def test_a_failed_answer_ends_failed_and_the_apology_is_an_answer_of_its_own():
    h = Harness()
    h.session.engines.llm = BrokenLLM("")
    h.session.handle(UserText("Hello."))
    h.session.handle(ResponseRequest())
    await h.until(lambda: len(h.of(ResponseEnded)) == 2)
    assert [(e.response, e.status) for e in h.of(ResponseEnded)] == [(1, "failed"), (2, "completed")]
    assert [e.response for e in h.of(ResponseStarted)] == [1, 2]
    await h.session.close()


async def test_a_withdrawn_answer_is_cancelled_and_its_turn_merged_into_the_new_one():
    h = Harness(answer=" ".join(f"w{i}." for i in range(40)), reply_grace_ms=1000)
    await h.feed(tone(0.5), realtime=False)
    await h.feed(quiet(0.3))
    await h.until(lambda: h.of(AgentAudio))
    await h.feed(quiet(0.2))  # the user resumes 200 ms after the answer started
    await h.feed(tone(0.6))
    await h.until(lambda: h.of(ResponseEnded))
    first, second = h.of(SpeechStarted)
    assert lifecycle(h)[3:] == ["ResponseStarted", "SpeechStarted", "TurnIgnored", "ResponseEnded:cancelled"]
    assert h.of(TurnIgnored) == [TurnIgnored(first.turn, merged=True)]
    assert h.of(ResponseEnded)[0].reason == "turn_detected"
    assert second.turn != first.turn
    await h.session.close()


async def test_commits_faster_than_whisper_merge_into_one_transcription():
    h = Harness()
    h.stt.delay = 0.3
    h.session.handle(SessionUpdate(turn_detection=TurnDetection(MANUAL, create_response=False)))
    for i in range(8):
        await h.feed(tone(0.2), realtime=False)
        h.session.handle(InputCommit(f"c{i}"))
    h.session.handle(ResponseRequest("r1"))
    await h.until(lambda: h.of(ResponseEnded), timeout=10)
    committed = [e.turn for e in h.of(TurnCommitted)]
    merged = [e.turn for e in h.of(TurnIgnored) if e.merged]
    assert len(committed) == 8 and merged and set(merged) < set(committed)
    # Whisper read every commit's audio, each once, in fewer calls than commits: all the words are there.
    assert h.stt.calls == 8 - len(merged) <= 3
    assert " ".join(h.finals("user")).count("word") == 8 * 2
    assert h.llm.requests[0][-1]["content"].count("word") == 8 * 2
    await h.session.close()


async def test_text_waiting_for_a_response_is_capped_in_items_and_characters():
    h = Harness(max_pending_items=3, max_pending_chars=50)
    for i in range(4):
        h.session.handle(UserText(f"Item {i}.", f"t{i}", f"item_{i}"))
    assert [e.item_id for e in h.of(UserTextAdded)] == ["item_0", "item_1", "item_2"]
    assert [(e.code, e.event_id) for e in h.of(Error)] == [("too_many_pending_items", "t3")]
    h.session.handle(ResponseRequest())  # takes the three
    await h.until(lambda: h.of(ResponseEnded))
    assert h.llm.requests[0][-1] == {"role": "user", "content": "Item 0. Item 1. Item 2."}
    h.session.handle(UserText("x" * 30, "long1"))
    h.session.handle(UserText("y" * 30, "long2"))  # 60 characters would wait
    assert [(e.code, e.event_id) for e in h.of(Error)][-1] == ("pending_text_too_long", "long2")
    assert len(h.of(UserTextAdded)) == 4
    await h.session.close()


async def test_idle_timeout_prompts_the_user_after_an_answer():
    h = Harness()
    h.session.handle(SessionUpdate(turn_detection=TurnDetection(SERVER_VAD, idle_timeout_ms=300)))
    assert h.of(SessionConfig)[-1].turn_detection.idle_timeout_ms == 300
    h.session.handle(UserText("Hello."))
    h.session.handle(ResponseRequest())
    await h.until(lambda: h.of(ResponseEnded))
    ended_at = asyncio.get_running_loop().time()
    await h.until(lambda: h.of(IdleTimeout), timeout=3)
    assert asyncio.get_running_loop().time() - ended_at >= 0.2  # 300 ms after the end, seen by polling
    await h.until(lambda: len(h.of(ResponseEnded)) == 2)  # the agent spoke again, from the history
    assert h.events.index(h.of(IdleTimeout)[0]) < h.events.index(h.of(ResponseStarted)[1])
    assert h.llm.requests[-1][-1]["role"] == "assistant"
    await h.session.close()


async def test_speech_after_an_answer_stops_the_idle_wait():
    h = Harness()
    h.session.handle(SessionUpdate(turn_detection=TurnDetection(SERVER_VAD, idle_timeout_ms=1200)))
    h.session.handle(UserText("Hello."))
    h.session.handle(ResponseRequest())
    await h.until(lambda: h.of(ResponseEnded))
    await h.feed(tone(0.8))  # the user speaks before the wait is over, and goes on past it
    await h.feed(quiet(0.8))
    await h.until(lambda: len(h.of(ResponseEnded)) == 2)
    assert not h.of(IdleTimeout)
    await h.session.close()


async def test_system_and_assistant_messages_join_the_history_and_the_next_prompt():
    h = Harness()
    h.session.handle(HistoryMessage("assistant", "Welcome to Ann's bakery.", "m1", "a1"))
    h.session.handle(HistoryMessage("system", "The bakery closes at six.", "m2", "s1"))
    assert h.of(HistoryMessageAdded) == [
        HistoryMessageAdded("assistant", "Welcome to Ann's bakery.", "a1"),
        HistoryMessageAdded("system", "The bakery closes at six.", "s1"),
    ]
    assert not h.llm.requests and not h.of(ResponseStarted)  # no answer follows
    h.session.handle(UserText("When do you close?"))
    h.session.handle(ResponseRequest())
    await h.until(lambda: h.of(ResponseEnded))
    assert h.llm.requests[0][1:] == [
        {"role": "assistant", "content": "Welcome to Ann's bakery."},
        {"role": "system", "content": "The bakery closes at six."},
        {"role": "user", "content": "When do you close?"},
    ]
    await h.session.close()


async def test_deleting_an_answer_a_message_or_waiting_text_and_refusing_the_rest():
    h = Harness()
    h.session.handle(HistoryMessage("assistant", "Welcome.", "", "a1"))
    h.session.handle(UserText("First question.", "", "t1"))
    h.session.handle(UserText("Never mind that.", "", "t2"))
    h.session.handle(ItemDelete("t2", "d1"))  # still waiting for a response: it never reaches the LLM
    h.session.handle(ItemDelete("a1", "d2"))
    assert h.of(ItemDeleted) == [ItemDeleted("t2"), ItemDeleted("a1")]
    h.session.handle(ResponseRequest())
    await h.until(lambda: h.of(ResponseEnded))
    assert h.llm.requests[0][1:] == [{"role": "user", "content": "First question."}]
    number = h.of(ResponseStarted)[0].response
    h.session.handle(ItemDelete("t1", "d3"))  # answered: part of the turn in the history
    assert [(e.code, e.event_id) for e in h.of(Error)] == [("item_not_deletable", "d3")]
    h.session.handle(ItemDelete("item_answer", "d4", response=number))
    assert h.of(ItemDeleted)[-1] == ItemDeleted("item_answer")
    assert h.session.history == [{"role": "user", "content": "First question."}]
    await h.session.close()
