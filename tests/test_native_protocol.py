import json

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from voice_agent.protocols.events import (
    AgentAudio,
    AudioReceived,
    Clear,
    Error,
    Mark,
    MarkPlayed,
    Metrics,
    ProtocolError,
    SessionStarted,
    StreamStopped,
    TextReceived,
    Transcript,
)
from voice_agent.protocols.native import MAX_TEXT_CHARS, NativeProtocol


def codes(events):
    return [e.code for e in events if isinstance(e, ProtocolError)]


def test_start_sets_the_rate_and_passes_options():
    codec = NativeProtocol()
    [event] = codec.receive_text('{"type": "start", "sample_rate": 48000, "system_prompt": "Be brief."}')
    assert event == SessionStarted(48000, {"system_prompt": "Be brief."})
    assert codec.sample_rate == 48000


def test_start_defaults_to_16k_and_accepts_integral_floats():
    assert NativeProtocol().receive_text('{"type": "start"}') == [SessionStarted(16000, {})]
    assert NativeProtocol().receive_text('{"type": "start", "sample_rate": 8000.0}') == [SessionStarted(8000, {})]


def test_audio_frames_decode_to_float():
    [event] = NativeProtocol().receive_bytes(np.array([0, 16384, -32768], "<i2").tobytes())
    assert isinstance(event, AudioReceived)
    assert event.samples.tolist() == [0.0, 0.5, -1.0]


def test_bad_input_gets_specific_errors():
    codec = NativeProtocol()
    assert codes(codec.receive_text("{not json")) == ["invalid_json"]
    assert codes(codec.receive_text("[1, 2]")) == ["invalid_message"]
    assert codes(codec.receive_text('{"type": "dance"}')) == ["unknown_type"]
    assert codes(codec.receive_text('{"no_type": 1}')) == ["unknown_type"]
    assert codes(codec.receive_text('{"type": "start", "sample_rate": 44100}')) == ["unsupported_sample_rate"]
    assert codes(codec.receive_text('{"type": "start", "sample_rate": "16000"}')) == ["unsupported_sample_rate"]
    assert codes(codec.receive_text('{"type": "start", "sample_rate": NaN}')) == ["unsupported_sample_rate"]
    assert codes(codec.receive_text('{"type": "start", "sample_rate": 1e400}')) == ["unsupported_sample_rate"]
    assert codes(codec.receive_text('{"type": "start", "sample_rate": true}')) == ["unsupported_sample_rate"]
    assert codes(codec.receive_bytes(b"\x00\x01\x02")) == ["odd_length_audio"]
    assert codes(codec.receive_text('{"type": "mark", "name": 3}')) == ["invalid_message"]
    assert codes(codec.receive_text('{"type": "text", "text": ""}')) == ["invalid_message"]
    too_long = json.dumps({"type": "text", "text": "a" * (MAX_TEXT_CHARS + 1)})
    assert codes(codec.receive_text(too_long)) == ["text_too_long"]
    assert codec.sample_rate == 16000


def test_start_after_audio_at_another_rate_is_refused():
    codec = NativeProtocol()
    codec.receive_bytes(b"\x00\x00" * 320)
    assert codes(codec.receive_text('{"type": "start", "sample_rate": 8000}')) == ["start_after_audio"]
    assert codec.sample_rate == 16000
    # The same rate is harmless.
    assert codec.receive_text('{"type": "start", "sample_rate": 16000}') == [SessionStarted(16000, {})]


def test_second_start_is_ignored():
    codec = NativeProtocol()
    codec.receive_text('{"type": "start", "sample_rate": 8000}')
    assert codes(codec.receive_text('{"type": "start", "sample_rate": 16000}')) == ["invalid_message"]
    assert codec.sample_rate == 8000


def test_other_client_messages():
    codec = NativeProtocol()
    assert codec.receive_text('{"type": "mark", "name": "3.1"}') == [MarkPlayed("3.1")]
    assert codec.receive_text('{"type": "text", "text": " hi "}') == [TextReceived("hi")]
    assert codec.receive_text('{"type": "stop"}') == [StreamStopped()]


def test_server_messages():
    codec = NativeProtocol()
    audio = codec.send(AgentAudio(np.array([0.5, -0.5], np.float32)))
    assert audio == np.array([16384, -16384], "<i2").tobytes()
    assert json.loads(codec.send(Transcript("user", "hi", True))) == {
        "type": "transcript",
        "role": "user",
        "text": "hi",
        "final": True,
    }
    assert json.loads(codec.send(Clear())) == {"type": "clear"}
    assert json.loads(codec.send(Mark("1.0"))) == {"type": "mark", "name": "1.0"}
    assert json.loads(codec.send(Metrics({"voice_to_voice_ms": 12.5}))) == {
        "type": "metrics",
        "voice_to_voice_ms": 12.5,
    }
    assert json.loads(codec.send(Error("x", "y"))) == {"type": "error", "code": "x", "message": "y"}


@given(st.text(max_size=300))
def test_any_text_yields_events_never_an_exception(text):
    events = NativeProtocol().receive_text(text)
    assert isinstance(events, list)


@given(
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
        max_leaves=20,
    ),
    st.sampled_from(["start", "mark", "text", "stop", "other"]),
)
def test_any_json_message_yields_events(value, kind):
    message = {"type": kind, "sample_rate": value, "name": value, "text": value}
    events = NativeProtocol().receive_text(json.dumps(message))
    assert all(not isinstance(e, Exception) for e in events)


@given(st.binary(max_size=2000))
def test_any_binary_yields_audio_or_an_error(data):
    events = NativeProtocol().receive_bytes(data)
    if len(data) % 2:
        assert codes(events) == ["odd_length_audio"]
    elif data:
        assert isinstance(events[0], AudioReceived) and len(events[0].samples) == len(data) // 2
