"""The strict decoder's value budget, every codec's, and the Realtime decoder's size caps and audio fast path."""

from __future__ import annotations

import base64
import json
import time

import pytest

from voice_agent.protocols.events import AudioReceived, ProtocolError
from voice_agent.protocols.native import NativeProtocol
from voice_agent.protocols.realtime import RealtimeProtocol
from voice_agent.protocols.realtime_json import MAX_APPEND_CHARS, _plain_append, decode_event
from voice_agent.protocols.strict_json import MAX_MESSAGE_CHARS, MAX_NODES, InvalidJSON, decode_object
from voice_agent.protocols.telephony import TWILIO, MediaStreamsProtocol

MIB = 1 << 20


def many(item: str, count: int, kind: str = "start") -> str:
    return '{"type": "' + kind + '", "x": [' + ",".join([item] * count) + "]}"


def code_of(text: str, max_chars: int = MAX_MESSAGE_CHARS) -> str:
    with pytest.raises(InvalidJSON) as refused:
        decode_object(text, max_chars)
    return refused.value.code


def test_values_up_to_the_budget_are_decoded():
    assert len(decode_object(many("0", MAX_NODES - 4))["x"]) == MAX_NODES - 4
    assert len(decode_object(many("{}", MAX_NODES // 2 - 4))["x"]) == MAX_NODES // 2 - 4  # empty ones count twice


@pytest.mark.parametrize("item", ["{}", "[]", "0", '""', "null", '{"a": [1]}'])
def test_past_the_budget_a_message_is_refused_before_parsing(item):
    assert code_of(many(item, MAX_NODES)) == "too_many_values"


def test_commas_and_brackets_inside_strings_are_not_values():
    text = json.dumps({"type": "text", "text": ",[{" * 5000, "quoted": 'say "a, b" \\ [ok]' * 300})
    assert decode_object(text)["text"] == ",[{" * 5000


def test_an_unclosed_string_does_not_hide_values():
    assert code_of('{"a": [' + "{}," * 5000 + '"') == "too_many_values"


@pytest.mark.parametrize("codec", [NativeProtocol(), MediaStreamsProtocol(TWILIO), RealtimeProtocol()], ids=repr)
def test_every_codec_refuses_the_flood_with_an_error(codec):
    [error] = codec.receive_text(many("{}", (MAX_MESSAGE_CHARS - 40) // 3))
    assert isinstance(error, ProtocolError) and error.code == "too_many_values"
    assert str(MAX_NODES) in error.message


def appended(audio: bytes, **fields) -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(audio).decode(), **fields})


def test_a_plain_append_is_read_without_the_json_decoder():
    text = appended(b"\x01\x00" * 100, event_id="e1")
    assert _plain_append(text) == decode_object(text) == decode_event(text)
    reordered = '{ "audio" : "AAE=" ,"event_id":"x","type":"input_audio_buffer.append"}\n'
    assert _plain_append(reordered) == {"audio": "AAE=", "event_id": "x", "type": "input_audio_buffer.append"}


@pytest.mark.parametrize(
    "text",
    [
        '{"type": "input_audio_buffer.append", "audio": "AA\\/E="}',  # an escape: the strict decoder reads it
        '{"type": "input_audio_buffer.append", "audio": "AAE=", "audio": "AAE="}',  # duplicate: refused there
        '{"type": "input_audio_buffer.append", "audio": "AAE=", "item_id": "x"}',  # another key
        '{"type": "input_audio_buffer.append", "audio": "AAE=", "event_id": "a\tb"}',  # a control character
        '{"type": "input_audio_buffer.commit", "audio": "AAE="}',
        '{"type": "input_audio_buffer.append"}',
        '{"type": "input_audio_buffer.append", "audio": "AAE="} {}',
        '{"type": "input_audio_buffer.append", "audio": "AAE="',
        '\u00a0{"type": "input_audio_buffer.append", "audio": "AAE="}',  # not JSON whitespace
    ],
)
def test_anything_but_a_plain_append_takes_the_strict_path(text):
    assert _plain_append(text) is None


def test_an_append_may_be_a_megabyte_and_any_other_event_64_kib():
    audio = bytes(MIB * 3 // 4 - 100)
    assert decode_event(appended(audio, event_id="e"))["event_id"] == "e"
    assert decode_event(appended(audio).replace("/", "\\/"))["type"] == "input_audio_buffer.append"
    update = json.dumps({"type": "session.update", "session": {"instructions": "x" * MAX_MESSAGE_CHARS}})
    with pytest.raises(InvalidJSON) as refused:
        decode_event(update)
    assert refused.value.code == "message_too_large" and "input_audio_buffer.append" in refused.value.message
    with pytest.raises(InvalidJSON) as refused:
        decode_event(" " * (MAX_APPEND_CHARS + 1))
    assert refused.value.code == "message_too_large"


def test_the_realtime_session_goes_on_after_a_refused_event():
    codec = RealtimeProtocol()
    [error] = codec.receive_text(json.dumps({"type": "session.update", "session": {"x": "y" * (MIB // 2)}}))
    assert error.code == "message_too_large"
    [audio] = codec.receive_text(appended(b"\x01\x00" * 2400))
    assert isinstance(audio, AudioReceived) and len(audio.samples) == 2400


def test_a_megabyte_of_empty_objects_costs_milliseconds():
    """The outside review's message: 349k empty objects, once a quarter of a second of the event loop."""
    text = many("{}", (MIB - 60) // 3, kind="session.update")
    assert len(text) <= MIB
    started = time.process_time()
    [error] = RealtimeProtocol().receive_text(text)
    took = time.process_time() - started
    assert error.code == "too_many_values"
    assert took < 0.05, took  # about 1 ms on a shared 2-core machine
