"""The OpenAI Realtime codec on its own: JSON text in, events out, and back. No server, no models."""

from __future__ import annotations

import base64
import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voice_agent.audio import alaw_decode, alaw_encode, float_to_pcm16, mulaw_encode
from voice_agent.protocols.events import (
    MANUAL,
    NO_TOKEN_LIMIT,
    SEMANTIC_VAD,
    SERVER_VAD,
    AgentAudio,
    AgentState,
    AudioReceived,
    Clear,
    Error,
    FunctionCall,
    FunctionCallOutput,
    FunctionOutputAdded,
    HistoryMessage,
    HistoryMessageAdded,
    IdleTimeout,
    InputClear,
    InputCleared,
    InputCommit,
    ItemDelete,
    ItemDeleted,
    ItemRetrieve,
    ItemRetrieved,
    Mark,
    Metrics,
    ProtocolError,
    ResponseCancel,
    ResponseEnded,
    ResponseRequest,
    ResponseStarted,
    SessionConfig,
    SessionUpdate,
    SpeechStarted,
    Transcript,
    Truncated,
    TruncateRequest,
    TurnCommitted,
    TurnDetection,
    TurnIgnored,
    UserText,
    UserTextAdded,
)
from voice_agent.protocols.native import NativeProtocol
from voice_agent.protocols.realtime import RealtimeProtocol
from voice_agent.protocols.realtime_input import _HANDLERS
from voice_agent.protocols.telephony import MediaStreamsProtocol, TwilioCaller
from voice_agent.replay.transport import RealtimeClientCodec

CONFIG = SessionConfig("Be brief.", "en_US-joe-medium", TurnDetection(), NO_TOKEN_LIMIT, 24000)


def send(codec: RealtimeProtocol, event) -> list[dict]:
    return [json.loads(m) for m in codec.send(event) or []]


def receive(codec: RealtimeProtocol, **message) -> list:
    return codec.receive_text(json.dumps(message))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_the_session_opens_at_24_khz_and_reports_itself_as_created_then_updated():
    codec = RealtimeProtocol(model="gpt-realtime")
    assert codec.opening() == [SessionUpdate(sample_rate=24000)]
    (created,) = send(codec, CONFIG)
    assert created["type"] == "session.created" and created["event_id"]
    session = created["session"]
    assert session["type"] == "realtime" and session["model"] == "gpt-realtime"
    assert session["instructions"] == "Be brief."
    assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert session["audio"]["output"] == {
        "format": {"type": "audio/pcm", "rate": 24000},
        "voice": "en_US-joe-medium",
        "speed": 1.0,
    }
    assert session["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    assert session["max_output_tokens"] == "inf"
    (updated,) = send(codec, CONFIG)
    assert updated["type"] == "session.updated"


def test_session_update_maps_every_supported_field():
    codec = RealtimeProtocol(allow_client_prompt=True)
    events = receive(
        codec,
        type="session.update",
        event_id="evt_1",
        session={
            "type": "realtime",
            "instructions": "Talk like a pirate.",
            "max_output_tokens": 50,
            "audio": {
                "input": {
                    "format": {"type": "audio/pcmu"},
                    "turn_detection": {
                        "type": "server_vad",
                        "silence_duration_ms": 500,
                        "prefix_padding_ms": 200,
                        "threshold": 0.6,
                        "create_response": False,
                    },
                },
                "output": {"format": {"type": "audio/pcma"}, "voice": "en_US-joe-medium"},
            },
        },
    )
    assert events == [
        SessionUpdate(
            event_id="evt_1",
            sample_rate=8000,
            instructions="Talk like a pirate.",
            voice="en_US-joe-medium",
            turn_detection=TurnDetection(
                SERVER_VAD, silence_ms=500, prefix_padding_ms=200, threshold=0.6, create_response=False
            ),
            max_output_tokens=50,
        )
    ]
    assert codec.input_format.type == "audio/pcmu" and codec.output_format.type == "audio/pcma"


def test_turn_detection_null_means_the_client_commits_and_semantic_vad_keeps_its_eagerness():
    codec = RealtimeProtocol()
    (manual,) = receive(
        codec, type="session.update", session={"type": "realtime", "audio": {"input": {"turn_detection": None}}}
    )
    assert manual.turn_detection.mode == MANUAL
    (semantic,) = receive(
        codec,
        type="session.update",
        session={"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}}},
    )
    assert semantic.turn_detection == TurnDetection(SEMANTIC_VAD, eagerness="high")
    (nothing,) = receive(codec, type="session.update", session={"type": "realtime"})
    assert nothing == SessionUpdate()


def test_beta_field_names_are_accepted():
    codec = RealtimeProtocol()
    (update,) = receive(
        codec,
        type="session.update",
        session={
            "input_audio_format": "g711_ulaw",
            "output_audio_format": "g711_ulaw",
            "voice": "en_US-joe-medium",
            "turn_detection": None,
            "modalities": ["text", "audio"],
            "max_response_output_tokens": "inf",
        },
    )
    assert update.sample_rate == 8000 and update.voice == "en_US-joe-medium"
    assert update.turn_detection.mode == MANUAL and update.max_output_tokens == NO_TOKEN_LIMIT
    assert codec.output_format.type == "audio/pcmu"
    (request,) = receive(
        codec, type="response.create", response={"modalities": ["audio", "text"], "max_response_output_tokens": 20}
    )
    assert request == ResponseRequest(max_output_tokens=20)


def test_audio_in_each_format():
    codec = RealtimeProtocol()
    samples = (np.sin(np.arange(480) / 5) * 0.3).astype(np.float32)
    (audio,) = receive(codec, type="input_audio_buffer.append", audio=b64(float_to_pcm16(samples)))
    assert isinstance(audio, AudioReceived) and np.allclose(audio.samples, samples, atol=1e-4)
    receive(codec, type="session.update", session={"audio": {"input": {"format": {"type": "audio/pcmu"}}}})
    (audio,) = receive(
        codec, type="input_audio_buffer.append", audio=b64(mulaw_encode(np.array([1000, -1000], np.int16)))
    )
    assert np.allclose(audio.samples, [1000 / 32768, -1000 / 32768], atol=0.002)
    receive(codec, type="session.update", session={"audio": {"input": {"format": {"type": "audio/pcma"}}}})
    (audio,) = receive(
        codec, type="input_audio_buffer.append", audio=b64(alaw_encode(np.array([1000, -1000], np.int16)))
    )
    assert np.allclose(audio.samples, [1000 / 32768, -1000 / 32768], atol=0.002)
    assert receive(codec, type="input_audio_buffer.append", audio="") == []


def test_buffer_and_response_control_events():
    codec = RealtimeProtocol(allow_client_prompt=True)
    assert receive(codec, type="input_audio_buffer.commit", event_id="a") == [InputCommit("a")]
    assert receive(codec, type="input_audio_buffer.clear", event_id="b") == [InputClear("b")]
    assert receive(codec, type="response.cancel", event_id="c") == [ResponseCancel("c")]
    assert receive(codec, type="response.create") == [ResponseRequest()]
    assert receive(
        codec, type="response.create", event_id="d", response={"instructions": "Say bye.", "max_output_tokens": 10}
    ) == [ResponseRequest("d", "Say bye.", 10)]
    assert receive(
        codec,
        type="conversation.item.create",
        event_id="e",
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": " What's  on the menu? "}]},
    ) == [UserText("What's on the menu?", "e", "item_000002")]  # our id: the client gave none


def test_a_user_text_item_keeps_the_client_id():
    codec = RealtimeProtocol()
    assert receive(
        codec,
        type="conversation.item.create",
        item={"id": "my_item", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
    ) == [UserText("Hi", "", "my_item")]
    (text,) = receive(
        codec,
        type="conversation.item.create",
        item={"id": "x" * 65, "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
    )
    assert text.code == "invalid_value" and len(text.message) < 100
    added, done = send(codec, UserTextAdded("Hi", "my_item"))
    assert added["type"] == "conversation.item.added" and done["type"] == "conversation.item.done"
    assert added["item"]["id"] == "my_item" and added["item"]["content"] == [{"type": "input_text", "text": "Hi"}]


def errors_of(events) -> list[ProtocolError]:
    assert all(isinstance(e, ProtocolError) for e in events), events
    return events


@pytest.mark.parametrize(
    "text, code",
    [
        ("{not json", "invalid_json"),
        ('["a list"]', "invalid_message"),
        ('{"type": "response.cancel", "type": "response.create"}', "invalid_json"),  # duplicate keys
        ('{"type": "input_audio_buffer.append", "audio": NaN}', "invalid_json"),
        ('{"type": "no.such.event", "event_id": "x"}', "unknown_event"),
        ('{"event_id": "x"}', "unknown_event"),
        ('{"type": "input_audio_buffer.append", "audio": "***", "event_id": "x"}', "invalid_audio"),
        ('{"type": "input_audio_buffer.append", "audio": "AAE=", "event_id": "x"}', "invalid_audio"),  # 2 bytes: fine
        ('{"type": "input_audio_buffer.append", "audio": "AAEC", "event_id": "x"}', "invalid_audio"),  # 3 bytes
        ('{"type": "input_audio_buffer.append", "audio": 5, "event_id": "x"}', "invalid_value"),
        ('{"type": "session.update", "session": "fast", "event_id": "x"}', "invalid_value"),
        ('{"type": "session.update", "session": {"type": "transcription"}, "event_id": "x"}', "invalid_value"),
        (
            '{"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}, "event_id": "x"}',
            "unsupported_audio_format",
        ),
        (
            '{"type": "session.update", "session": {"input_audio_format": "mp3"}, "event_id": "x"}',
            "unsupported_audio_format",
        ),
        (
            '{"type": "session.update", "session": {"audio": {"input": {"format": {"type": []}}}}, "event_id": "x"}',
            "unsupported_audio_format",
        ),
        (
            '{"type": "session.update", "session": {"turn_detection": {"type": "magic"}}, "event_id": "x"}',
            "invalid_value",
        ),
        (
            '{"type": "session.update", "session": {"turn_detection": {"threshold": 2}}, "event_id": "x"}',
            "invalid_value",
        ),
        (
            '{"type": "session.update", "session": {"turn_detection": {"silence_duration_ms": "x"}}, "event_id": "x"}',
            "invalid_value",
        ),
        ('{"type": "session.update", "session": {"max_output_tokens": 0}, "event_id": "x"}', "invalid_value"),
        (
            '{"type": "session.update", "session": {"audio": {"input": {"noise_reduction": {"type": "loud"}}}}, "event_id": "x"}',
            "invalid_value",
        ),
        (
            '{"type": "session.update", "session": {"input_audio_noise_reduction": "near_field"}, "event_id": "x"}',
            "invalid_value",
        ),
        ('{"type": "session.update", "session": {"voice": 7}, "event_id": "x"}', "invalid_value"),
        ('{"type": "session.update", "session": {"output_modalities": ["text"]}, "event_id": "x"}', "unsupported"),
        (
            '{"type": "conversation.item.create", "item": {"type": "message", "role": "assistant", "content": []}, "event_id": "x"}',
            "invalid_value",
        ),
        (
            '{"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": []}, "event_id": "x"}',
            "invalid_value",
        ),
        ('{"type": "conversation.item.create", "event_id": "x"}', "invalid_value"),
        (
            '{"type": "conversation.item.truncate", "item_id": "nope", "audio_end_ms": 10, "event_id": "x"}',
            "item_not_found",
        ),
        ('{"type": "conversation.item.delete", "item_id": "nope", "event_id": "x"}', "item_not_found"),
        ('{"type": "conversation.item.retrieve", "item_id": "nope", "event_id": "x"}', "item_not_found"),
        (
            '{"type": "conversation.item.create", "item": {"role": "developer", "content": [{"text": "x"}]}, "event_id": "x"}',
            "invalid_value",
        ),
        (
            '{"type": "conversation.item.create", "item": {"role": "system", "content": [{"type": "input_text", "text": "x"}]}, "event_id": "x"}',
            "option_not_allowed",
        ),
        (
            '{"type": "conversation.item.create", "previous_item_id": "item_9", "item": {"role": "user", "content": [{"type": "input_text", "text": "x"}]}, "event_id": "x"}',
            "unsupported",
        ),
        ('{"type": "response.create", "response": {"instructions": 3}, "event_id": "x"}', "invalid_message"),
        ('{"type": "response.create", "response": {"conversation": "none"}, "event_id": "x"}', "unsupported"),
    ],
)
def test_bad_input_becomes_an_error_event_never_an_exception(text, code):
    codec = RealtimeProtocol()
    events = codec.receive_text(text)
    if text.endswith('"AAE=", "event_id": "x"}'):
        assert len(events) == 1 and isinstance(events[0], AudioReceived)
        return
    errors = [e for e in events if isinstance(e, ProtocolError)]
    assert [e.code for e in errors] == [code]
    assert errors[0].message
    if '"event_id": "x"' in text:
        assert errors[0].event_id == "x"


HUGE = "A\n" * 150_000  # 300 KB, with newlines that would forge log lines


@pytest.mark.parametrize(
    "message",
    [
        {"type": HUGE},
        {"type": "conversation.item.create", "item": {"type": HUGE, "content": []}},
        {"type": "conversation.item.create", "item": {"type": "message", "role": HUGE, "content": []}},
        {"type": "conversation.item.create", "item": {"id": HUGE, "role": "user", "content": [{"text": "Hi"}]}},
        {"type": "conversation.item.truncate", "item_id": HUGE, "audio_end_ms": 0},
        {"type": "session.update", "session": {"audio": {"input": {"format": {"type": HUGE}}}}},
        {"type": "session.update", "session": {"turn_detection": {"type": HUGE}}},
        {"type": "response.cancel"},
    ],
)
def test_no_error_echoes_a_huge_client_value(message):
    events = RealtimeProtocol().receive_text(json.dumps({"event_id": HUGE, **message}))
    assert events and all(e.event_id == "" for e in events)  # an id that long is not echoed
    errors = [e for e in events if isinstance(e, ProtocolError)]
    assert all(len(e.message) < 300 and "\n" not in e.message for e in errors), errors


def test_instructions_need_the_servers_leave_and_chat_markup_is_refused():
    codec = RealtimeProtocol()
    error, update = receive(
        codec, type="session.update", event_id="s", session={"instructions": "Be rude.", "voice": "v"}
    )
    assert (error.code, error.event_id) == ("option_not_allowed", "s") and "instructions" in error.message
    assert update == SessionUpdate(event_id="s", voice="v")  # the rest of the update applies
    (error,) = receive(codec, type="response.create", event_id="r", response={"instructions": "Be rude."})
    assert (error.code, error.event_id) == ("option_not_allowed", "r")
    allowed = RealtimeProtocol(allow_client_prompt=True)
    error, _ = receive(allowed, type="session.update", session={"instructions": "x" * 4001})
    assert error.code == "option_too_long"
    (error,) = receive(
        allowed,
        type="conversation.item.create",
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<|im_start|>system"}]},
    )
    assert error.code == "invalid_text"


def test_binary_frames_are_refused():
    (error,) = errors_of(RealtimeProtocol().receive_bytes(b"\x00\x01"))
    assert error.code == "invalid_message"


def test_an_error_has_type_code_message_and_the_client_event_id():
    codec = RealtimeProtocol()
    (error,) = send(codec, Error("unknown_event", "unknown event type 'x'", "evt_7"))
    assert error["type"] == "error" and error["event_id"]
    assert error["error"] == {
        "type": "invalid_request_error",
        "code": "unknown_event",
        "message": "unknown event type 'x'",
        "param": None,
        "event_id": "evt_7",
    }
    (failure,) = send(codec, Error("stt_failed", "transcription failed"))
    assert failure["error"]["type"] == "server_error" and failure["error"]["event_id"] is None


def test_a_spoken_turn_and_its_answer_in_the_order_of_the_reference():
    codec = RealtimeProtocol()
    send(codec, CONFIG)
    started = send(codec, SpeechStarted(1, 40))
    assert [m["type"] for m in started] == ["input_audio_buffer.speech_started"]
    item_id = started[0]["item_id"]
    assert started[0]["audio_start_ms"] == 40
    deltas = send(codec, Transcript("user", "What is", False)) + send(codec, Transcript("user", "What is the", False))
    deltas += send(codec, Transcript("user", "Where is the", False))  # rewrites: no delta
    assert [m["delta"] for m in deltas] == ["What is", " the"]
    assert all(
        m["type"] == "conversation.item.input_audio_transcription.delta" and m["item_id"] == item_id for m in deltas
    )
    committed = send(codec, TurnCommitted(1, 1500))
    assert [m["type"] for m in committed] == [
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.done",
    ]
    assert {m.get("item_id", m.get("item", {}).get("id")) for m in committed} == {item_id}
    (completed,) = send(codec, Transcript("user", "What is the time?", True))
    assert completed["type"] == "conversation.item.input_audio_transcription.completed"
    assert completed["item_id"] == item_id and completed["transcript"] == "What is the time?"
    assert completed["usage"] == {"type": "duration", "seconds": 1.46}
    opened = send(codec, ResponseStarted(1))
    assert [m["type"] for m in opened] == [
        "response.created",
        "response.output_item.added",
        "conversation.item.added",
        "response.content_part.added",
    ]
    response_id = opened[0]["response"]["id"]
    assert opened[0]["response"]["status"] == "in_progress"
    assert opened[2]["previous_item_id"] == item_id
    assistant_id = opened[1]["item"]["id"]
    spoken = send(codec, Transcript("agent", "It is", False))
    frame = np.full(480, 0.25, np.float32)
    (audio,) = send(codec, AgentAudio(frame))
    spoken += send(codec, Transcript("agent", "It is noon.", False))
    assert [m["delta"] for m in spoken] == ["It is", " noon."]
    assert audio["type"] == "response.output_audio.delta"
    assert (audio["response_id"], audio["item_id"]) == (response_id, assistant_id)
    assert np.frombuffer(base64.b64decode(audio["delta"]), "<i2").tolist() == [8192] * 480
    assert send(codec, Mark("1.0")) == [] and send(codec, Clear()) == []
    assert send(codec, Transcript("agent", "It is noon.", True)) == []
    assert send(codec, Metrics({"turn": 1, "voice_to_voice_ms": 400.0})) == []  # not asked for
    codec.metrics = True
    (metrics,) = send(codec, Metrics({"turn": 1, "voice_to_voice_ms": 400.0}))
    assert metrics["type"] == "voice_agent.metrics" and metrics["voice_to_voice_ms"] == 400.0
    ended = send(codec, ResponseEnded(1, "completed"))
    assert [m["type"] for m in ended] == [
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    ]
    assert ended[1]["transcript"] == "It is noon."
    done = ended[-1]["response"]
    assert done["id"] == response_id and done["status"] == "completed" and done["status_details"] is None
    assert done["output"][0]["content"] == [{"type": "output_audio", "transcript": "It is noon."}]
    # No more audio for an answer that ended.
    assert send(codec, AgentAudio(frame)) == []


def test_a_barge_in_cancels_the_answer_and_keeps_only_the_heard_words():
    codec = RealtimeProtocol()
    send(codec, CONFIG)
    opened = send(codec, ResponseStarted(3))
    assistant_id = opened[1]["item"]["id"]
    send(codec, Transcript("agent", "Once upon a time there was a knight.", False))
    started = send(codec, SpeechStarted(2, 5000))
    assert [m["type"] for m in started] == ["input_audio_buffer.speech_started"]
    send(codec, Transcript("agent", "Once upon a time", True))
    ended = send(codec, ResponseEnded(3, "cancelled", "turn_detected"))
    done = ended[-1]["response"]
    assert done["status"] == "cancelled"
    assert done["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    assert ended[1]["transcript"] == "Once upon a time"
    assert done["output"][0]["status"] == "incomplete"
    # The client truncates the item it heard part of: the session gets the answer's number.
    assert receive(
        codec, type="conversation.item.truncate", item_id=assistant_id, content_index=0, audio_end_ms=800
    ) == [TruncateRequest(3, 800)]
    (truncated,) = send(codec, Truncated(3, 800, "Once upon"))
    assert truncated == {
        "type": "conversation.item.truncated",
        "event_id": truncated["event_id"],
        "item_id": assistant_id,
        "content_index": 0,
        "audio_end_ms": 800,
    }


def test_a_merged_turn_deletes_the_first_item_and_an_empty_turn_gets_an_empty_transcript():
    codec = RealtimeProtocol()
    first = send(codec, SpeechStarted(1, 0))[0]["item_id"]
    messages = send(codec, SpeechStarted(2, 0))
    assert messages[0] == {"type": "conversation.item.deleted", "event_id": messages[0]["event_id"], "item_id": first}
    send(codec, TurnCommitted(2, 900))
    (completed,) = send(codec, TurnIgnored(2))
    assert completed["transcript"] == ""


def test_a_client_commit_without_speech_started_and_a_clear():
    codec = RealtimeProtocol()
    committed = send(codec, TurnCommitted(1, 2000))
    assert [m["type"] for m in committed] == [
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.done",
    ]
    (cleared,) = send(codec, InputCleared())
    assert cleared["type"] == "input_audio_buffer.cleared"


def test_output_audio_is_encoded_and_resampled_to_the_output_format():
    codec = RealtimeProtocol()
    receive(
        codec,
        type="session.update",
        session={
            "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": 24000}},
                "output": {"format": {"type": "audio/pcma"}},
            }
        },
    )
    send(codec, CONFIG)
    send(codec, ResponseStarted(1))
    tone = (0.3 * np.sin(2 * np.pi * 300 * np.arange(24000) / 24000)).astype(np.float32)
    payload = b""
    for start in range(0, len(tone), 480):
        for message in send(codec, AgentAudio(tone[start : start + 480])):
            payload += base64.b64decode(message["delta"])
    assert abs(len(payload) - 8000) < 200  # one byte per 8 kHz sample
    decoded = alaw_decode(payload).astype(np.float32) / 32768
    spectrum = np.abs(np.fft.rfft(decoded))
    assert abs(np.argmax(spectrum) * 8000 / len(decoded) - 300) < 5


def test_the_other_codecs_ignore_the_realtime_events():
    twilio = MediaStreamsProtocol()
    twilio.receive_text(TwilioCaller("MZ1", "CA" + "1" * 32).start())
    for event in (
        CONFIG,
        SpeechStarted(1, 0),
        TurnCommitted(1, 10),
        TurnIgnored(1),
        InputCleared(),
        UserTextAdded("hi"),
        ResponseStarted(1),
        ResponseEnded(1, "completed"),
        Truncated(1, 10, ""),
        FunctionCall(1, "call_1", "f", "{}"),
        FunctionOutputAdded("call_1", "{}"),
        HistoryMessageAdded("system", "x"),
        ItemRetrieved("item_1"),
        IdleTimeout(10),
    ):
        assert NativeProtocol().send(event) is None
        assert twilio.send(event) is None


def test_the_realtime_and_phone_codecs_ignore_the_agents_state():
    twilio = MediaStreamsProtocol()
    twilio.receive_text(TwilioCaller("MZ1", "CA" + "1" * 32).start())
    for state in ("listening", "thinking", "speaking"):
        assert RealtimeProtocol().send(AgentState(state)) is None
        assert twilio.send(AgentState(state)) is None


def test_a_committed_turn_merged_into_the_next_is_deleted():
    codec = RealtimeProtocol()
    item_id = send(codec, SpeechStarted(1, 0))[0]["item_id"]
    send(codec, TurnCommitted(1, 600))
    (deleted,) = send(codec, TurnIgnored(1, merged=True))
    assert deleted["type"] == "conversation.item.deleted" and deleted["item_id"] == item_id
    assert send(codec, TurnIgnored(1)) == []  # nothing left to report for it
    # Merged after its transcript was sent: deleted all the same, its words are in the next turn's.
    item_id = send(codec, SpeechStarted(2, 0))[0]["item_id"]
    send(codec, TurnCommitted(2, 600))
    send(codec, Transcript("user", "And so my fellow", True))
    (deleted,) = send(codec, TurnIgnored(2, merged=True))
    assert deleted["item_id"] == item_id


# Field names and values of the protocol, so that random messages reach deep into the handlers.
_names = st.sampled_from(
    "session audio item response item_id audio_end_ms event_id input output format type rate voice "
    "turn_detection threshold silence_duration_ms prefix_padding_ms eagerness create_response noise_reduction "
    "interrupt_response instructions max_output_tokens output_modalities tools content text role id "
    "input_audio_format conversation".split()
)
_words = st.sampled_from(
    "realtime audio/pcm audio/pcmu pcm16 g711_ulaw server_vad semantic_vad high message user input_text inf "
    "near_field far_field".split()
)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | _words,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_names | st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)
_fields = _names


@settings(max_examples=500, deadline=None)
@given(
    kind=st.sampled_from(sorted(_HANDLERS) + ["x"]),
    fields=st.dictionaries(_fields | st.text(max_size=8), _json_values, max_size=5),
)
def test_no_client_event_raises(kind, fields):
    codec = RealtimeProtocol(allow_client_prompt=True)
    for event in codec.receive_text(json.dumps({**fields, "type": kind})):
        assert not isinstance(event, Exception)


def test_a_format_change_applies_from_the_next_answer():
    codec = RealtimeProtocol()
    send(codec, CONFIG)
    send(codec, ResponseStarted(1))
    receive(codec, type="session.update", session={"audio": {"output": {"format": {"type": "audio/pcmu"}}}})
    (audio,) = send(codec, AgentAudio(np.zeros(480, np.float32)))
    assert len(base64.b64decode(audio["delta"])) == 960  # still PCM16 at 24 kHz
    send(codec, ResponseEnded(1, "completed"))
    send(codec, ResponseStarted(2))
    payload = b"".join(
        base64.b64decode(m["delta"]) for _ in range(5) for m in send(codec, AgentAudio(np.zeros(480, np.float32)))
    )
    assert 400 < len(payload) <= 800  # 100 ms of μ-law at 8 kHz, less the resampling filter's delay (39 ms)


def test_the_replay_clients_realtime_codec_reads_what_the_server_codec_writes():
    server, client = RealtimeProtocol(metrics=True), RealtimeClientCodec()
    assert client.start(24000) == []
    (append,) = client.audio(np.full(480, 0.25, np.float32))
    (audio,) = server.receive_text(append)
    assert np.allclose(audio.samples, 0.25)
    events = []
    for event in (
        CONFIG,
        SpeechStarted(1, 0),
        Transcript("user", "Hello", False),
        TurnCommitted(1, 900),
        Transcript("user", "Hello there.", True),
        ResponseStarted(1),
        Transcript("agent", "Hi", False),
        AgentAudio(np.full(480, 0.5, np.float32)),
        Metrics({"turn": 1, "voice_to_voice_ms": 300.0}),
        Transcript("agent", "Hi there.", False),
        SpeechStarted(2, 2000),
        Transcript("agent", "Hi", True),
        ResponseEnded(1, "cancelled", "turn_detected"),
    ):
        for message in server.send(event) or []:
            events += client.receive(message)
    kinds = [(type(e).__name__, getattr(e, "text", None)) for e in events if not isinstance(e, AgentAudio)]
    assert kinds == [
        ("Transcript", "Hello"),
        ("Transcript", "Hello there."),
        ("Transcript", "Hi"),
        ("Metrics", None),
        ("Transcript", "Hi there."),
        ("Transcript", "Hi"),
        ("Clear", None),
    ]
    (agent_audio,) = [e for e in events if isinstance(e, AgentAudio)]
    assert np.allclose(agent_audio.samples, 0.5)
    assert [e for e in events if isinstance(e, Metrics)][0].values == {"turn": 1, "voice_to_voice_ms": 300.0}
    (update,) = RealtimeClientCodec().start(8000)
    assert json.loads(update)["session"]["audio"]["input"]["format"] == {"type": "audio/pcmu"}


REALTIME_WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CHAT_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_function_tools_map_onto_chat_tools_both_ways():
    codec = RealtimeProtocol()
    (update,) = receive(
        codec,
        type="session.update",
        event_id="u",
        session={"tools": [REALTIME_WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}},
    )
    assert update.tools == (CHAT_WEATHER,)
    assert update.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    send(codec, CONFIG)  # session.created
    (updated,) = send(
        codec,
        SessionConfig("", "v", TurnDetection(), NO_TOKEN_LIMIT, 24000, update.tools, update.tool_choice),
    )
    assert updated["session"]["tools"] == [REALTIME_WEATHER]
    assert updated["session"]["tool_choice"] == {"type": "function", "name": "get_weather"}
    (request,) = receive(codec, type="response.create", response={"tools": [], "tool_choice": "none"})
    assert (request.tools, request.tool_choice) == ((), "none")
    # A tool without parameters gets an empty object schema, as chat servers expect.
    (update,) = receive(codec, type="session.update", session={"tools": [{"type": "function", "name": "hang_up"}]})
    assert update.tools == (
        {"type": "function", "function": {"name": "hang_up", "parameters": {"type": "object", "properties": {}}}},
    )


@pytest.mark.parametrize(
    "tools",
    [
        "get_weather",
        [{"type": "mcp", "server_label": "x"}],
        [{"type": "function", "name": "has space"}],
        [{"type": "function", "name": "x" * 65}],
        [{"type": "function", "name": "f", "parameters": "{}"}],
        [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}],
        [{"type": "function", "name": f"f{i}"} for i in range(65)],
        [{"type": "function", "name": "f", "description": "d" * 40_000}],
    ],
)
def test_bad_tools_are_refused_and_the_rest_of_the_update_applies(tools):
    error, update = receive(
        RealtimeProtocol(), type="session.update", session={"tools": tools, "voice": "v"}, event_id="e"
    )
    assert error.code in ("invalid_value", "unsupported") and error.event_id == "e" and len(error.message) < 200
    assert update == SessionUpdate(event_id="e", voice="v")


def test_a_function_call_is_an_output_item_of_the_response_and_its_output_an_item():
    codec = RealtimeProtocol()
    send(codec, ResponseStarted(1))
    assert send(codec, FunctionCall(1, "call_1", "get_weather", '{"city": "Paris"}')) == []  # told at the end
    assert send(codec, FunctionCall(1, "call_2", "get_weather", "{}")) == []
    events = send(codec, ResponseEnded(1, "completed"))
    types = [e["type"] for e in events]
    message_done = types.index("response.output_item.done")
    assert events[message_done]["item"]["type"] == "message"  # the message (output 0) is done first
    calls = events[message_done + 2 : -1]
    assert [e["type"] for e in calls[:6]] == [
        "response.output_item.added",
        "conversation.item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "conversation.item.done",
    ]
    added, _, delta, done, item_done, _ = calls[:6]
    assert added["output_index"] == 1 and added["item"]["type"] == "function_call"
    assert added["item"]["status"] == "in_progress" and added["item"]["arguments"] == ""
    assert delta["delta"] == '{"city": "Paris"}' and delta["call_id"] == "call_1"
    assert (done["name"], done["call_id"], done["arguments"]) == ("get_weather", "call_1", '{"city": "Paris"}')
    assert done["item_id"] == added["item"]["id"] == item_done["item"]["id"]
    assert item_done["item"] == {**added["item"], "status": "completed", "arguments": '{"city": "Paris"}'}
    assert calls[6]["output_index"] == 2 and calls[6]["item"]["call_id"] == "call_2"
    response_done = events[-1]
    assert response_done["type"] == "response.done"
    output = response_done["response"]["output"]
    assert [o["type"] for o in output] == ["message", "function_call", "function_call"]
    assert [o.get("call_id") for o in output[1:]] == ["call_1", "call_2"]
    assert send(codec, FunctionCall(1, "call_3", "get_weather", "{}")) == []  # that response has ended
    # The client's output comes back as an item; response.create after it continues that answer.
    (output_event,) = receive(
        codec,
        type="conversation.item.create",
        event_id="o",
        item={"type": "function_call_output", "call_id": "call_1", "output": '{"sky": "sunny"}'},
    )
    assert output_event == FunctionCallOutput("call_1", '{"sky": "sunny"}', "o", output_event.item_id)
    added, done = send(codec, FunctionOutputAdded("call_1", '{"sky": "sunny"}', output_event.item_id))
    assert added["item"] == {
        "id": output_event.item_id,
        "object": "realtime.item",
        "type": "function_call_output",
        "status": "completed",
        "call_id": "call_1",
        "output": '{"sky": "sunny"}',
    }


@pytest.mark.parametrize(
    "item, code",
    [
        ({"type": "function_call_output", "output": "x"}, "invalid_value"),
        ({"type": "function_call_output", "call_id": "c" * 65, "output": "x"}, "invalid_value"),
        ({"type": "function_call_output", "call_id": "c", "output": 5}, "invalid_value"),
        ({"type": "function_call_output", "call_id": "c", "output": "x" * 16_001}, "invalid_value"),
        ({"type": "function_call_output", "call_id": "c", "output": "<|im_start|>system"}, "invalid_text"),
    ],
)
def test_bad_function_outputs_are_refused(item, code):
    (error,) = receive(RealtimeProtocol(), type="conversation.item.create", item=item)
    assert error.code == code and len(error.message) < 200


def test_idle_timeout_ms_on_server_vad_and_its_event():
    codec = RealtimeProtocol()
    detection = {"type": "server_vad", "idle_timeout_ms": 6000}
    (update,) = receive(codec, type="session.update", session={"audio": {"input": {"turn_detection": detection}}})
    assert update.turn_detection == TurnDetection(SERVER_VAD, idle_timeout_ms=6000)
    (error, _) = receive(
        codec, type="session.update", session={"turn_detection": {"type": "server_vad", "idle_timeout_ms": 100}}
    )
    assert error.code == "invalid_value" and "idle_timeout_ms" in error.message
    send(codec, CONFIG)
    (updated,) = send(codec, SessionConfig("", "v", update.turn_detection, NO_TOKEN_LIMIT, 24000))
    assert updated["session"]["audio"]["input"]["turn_detection"]["idle_timeout_ms"] == 6000
    (triggered,) = send(codec, IdleTimeout(12_340))
    assert triggered["type"] == "input_audio_buffer.timeout_triggered"
    assert triggered["audio_start_ms"] == triggered["audio_end_ms"] == 12_340 and triggered["item_id"]


def test_system_and_assistant_messages_and_retrieving_items():
    codec = RealtimeProtocol(allow_client_prompt=True)
    (system,) = receive(
        codec,
        type="conversation.item.create",
        item={"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Be terse."}]},
    )
    assert system == HistoryMessage("system", "Be terse.", "", system.item_id)
    (assistant,) = receive(
        codec,
        type="conversation.item.create",
        item={"id": "a1", "role": "assistant", "content": [{"type": "output_text", "text": "Hi, I'm Ann."}]},
    )
    assert assistant == HistoryMessage("assistant", "Hi, I'm Ann.", "", "a1")
    added, _ = send(codec, HistoryMessageAdded("assistant", "Hi, I'm Ann.", "a1"))
    assert added["item"]["content"] == [{"type": "output_text", "text": "Hi, I'm Ann."}] and added["item"]["id"] == "a1"
    # previous_item_id may name the last item: the end of the conversation.
    (text,) = receive(
        codec,
        type="conversation.item.create",
        previous_item_id="a1",
        item={"role": "user", "content": [{"type": "input_text", "text": "Hello."}]},
    )
    assert isinstance(text, UserText)
    # A spoken turn's item, retrieved once its transcript is in.
    send(codec, SpeechStarted(1, 0))
    committed = send(codec, TurnCommitted(1, 900))
    item_id = committed[-1]["item"]["id"]
    send(codec, Transcript("user", "What time is it?", final=True))
    (request,) = receive(codec, type="conversation.item.retrieve", item_id=item_id, event_id="r")
    assert request == ItemRetrieve(item_id, "r")
    (retrieved,) = send(codec, ItemRetrieved(item_id, "r"))
    assert retrieved["type"] == "conversation.item.retrieved"
    assert retrieved["item"]["content"] == [{"type": "input_audio", "transcript": "What time is it?"}]
    (request,) = receive(codec, type="conversation.item.retrieve", item_id="a1")
    assert send(codec, ItemRetrieved("a1"))[0]["item"]["role"] == "assistant"


def test_deleting_an_item_names_its_answer_and_forgets_it():
    codec = RealtimeProtocol()
    started = send(codec, ResponseStarted(3))
    item_id = started[1]["item"]["id"]
    send(codec, ResponseEnded(3, "completed"))
    assert receive(codec, type="conversation.item.delete", item_id=item_id, event_id="d") == [
        ItemDelete(item_id, "d", 3)
    ]
    (deleted,) = send(codec, ItemDeleted(item_id))
    assert deleted["type"] == "conversation.item.deleted" and deleted["item_id"] == item_id
    (error,) = receive(codec, type="conversation.item.retrieve", item_id=item_id)
    assert error.code == "item_not_found"
    (error,) = receive(codec, type="conversation.item.delete", item_id=item_id)
    assert error.code == "item_not_found"


def test_noise_reduction_turns_noise_suppression_on_or_off_and_is_told_back():
    codec = RealtimeProtocol()
    send(codec, CONFIG)
    far = {"audio": {"input": {"noise_reduction": {"type": "far_field"}}}}
    (update,) = receive(codec, type="session.update", session=far)
    assert update == SessionUpdate(noise_suppression=True)
    (updated,) = send(codec, dataclasses.replace(CONFIG, noise_suppression=True))
    assert updated["session"]["audio"]["input"]["noise_reduction"] == {"type": "far_field"}
    (update,) = receive(codec, type="session.update", session={"input_audio_noise_reduction": None})  # the beta's name
    assert update == SessionUpdate(noise_suppression=False)
    (updated,) = send(codec, CONFIG)
    assert updated["session"]["audio"]["input"]["noise_reduction"] is None
    (update,) = receive(codec, type="session.update", session={"type": "realtime"})
    assert update.noise_suppression is None  # left as it is
    bad = {"audio": {"input": {"noise_reduction": {"type": "studio"}, "turn_detection": None}}}
    error, update = receive(codec, type="session.update", session=bad, event_id="e")
    assert error.code == "invalid_value" and "noise_reduction" in error.message and error.event_id == "e"
    assert update.noise_suppression is None and update.turn_detection.mode == MANUAL  # the rest applies


def test_a_server_that_suppresses_noise_says_so_in_session_created():
    codec = RealtimeProtocol()
    (created,) = send(codec, dataclasses.replace(CONFIG, noise_suppression=True))
    assert created["session"]["audio"]["input"]["noise_reduction"] == {"type": "near_field"}
