"""``/v1/realtime`` end to end: the official ``openai`` SDK as the client, a real server, the real models."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.chat_server import Call, ChatServer, last_tool_results
from tests.conftest import start_server, stop_server
from tests.realtimeclient import RealtimeClient
from tests.speech import silence, speech
from tests.test_llm_openai import ScriptedEndpoint
from voice_agent.audio import float_to_pcm16, mulaw_decode

pytestmark = pytest.mark.e2e

VOICE = "en_US-joe-medium"
STORY = (
    "Once upon a time, a brave knight rode out of the castle. He crossed seven rivers and nine green hills. "
    "At the end of the road he met an old dragon by a lake. The dragon was tired of fighting and wanted a friend. "
    "So the knight sat down, and they talked until the sun went down."
)


def words(text: str) -> set[str]:
    return set("".join(c for c in text.lower() if c.isalnum() or c.isspace()).split())


def pcm(data: bytes) -> np.ndarray:
    return np.frombuffer(data, "<i2")


async def test_a_spoken_question_streamed_at_24_khz_gets_a_spoken_answer(server):
    client = await RealtimeClient.connect(server, model="gpt-realtime")
    created = await client.wait_for("session.created", timeout=10)
    assert created.session.model == "gpt-realtime"
    assert created.session.audio.output.voice == VOICE
    await client.connection.session.update(
        session={
            "type": "realtime",
            "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": {"type": "server_vad"}},
                "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": VOICE},
            },
        }
    )
    updated = await client.wait_for("session.updated", timeout=10)
    assert updated.session.audio.input.turn_detection.type == "server_vad"
    spoken_at = await client.stream(
        np.concatenate([speech("What is the capital of France?", 24000), silence(0.3, 24000)])
    )
    streaming = asyncio.create_task(client.stream(silence(8.0, 24000)))
    started = await client.wait_for("input_audio_buffer.speech_started", timeout=5)
    completed = await client.wait_for("conversation.item.input_audio_transcription.completed", timeout=15)
    assert completed.item_id == started.item_id
    assert {"capital", "france"} <= words(completed.transcript)
    done = await client.wait_for("response.done", timeout=30)
    assert done.response.status == "completed"
    await streaming
    types = client.types()
    order = [
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_audio.delta",
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.done",
    ]
    assert [types.index(t) for t in order] == sorted(types.index(t) for t in order), types
    response_id = done.response.id
    transcript = "".join(e.delta for e in client.events("response.output_audio_transcript.delta"))
    assert transcript.strip() and transcript == done.response.output[0].content[0].transcript
    audio = pcm(client.audio(response_id))
    assert np.abs(audio).max() > 1000  # speech, not silence
    deltas = [(at, e) for at, e in client.received if e.type == "response.output_audio.delta"]
    # Paced at real time, not all at once: the answer's audio arrives over about its own length.
    assert deltas[-1][0] - deltas[0][0] > 0.6 * len(audio) / 24000 - 0.3
    (metrics,) = client.events("voice_agent.metrics")
    assert 0 < metrics.voice_to_voice_ms < 5000
    assert deltas[0][0] - spoken_at < 5
    await client.close()


async def test_with_turn_detection_null_the_client_commits_and_asks_for_the_answer(server):
    client = await RealtimeClient.connect(server)
    await client.wait_for("session.created", timeout=10)
    await client.connection.session.update(session={"type": "realtime", "audio": {"input": {"turn_detection": None}}})
    updated = await client.wait_for("session.updated", timeout=10)
    assert updated.session.audio.input.turn_detection is None
    await client.stream(np.concatenate([speech("What is the capital of France?", 24000), silence(1.0, 24000)]))
    await asyncio.sleep(1.0)  # a server that still decided turns itself would have answered by now
    assert "input_audio_buffer.speech_started" not in client.types()
    assert "response.created" not in client.types()
    await client.connection.input_audio_buffer.commit()
    await client.connection.response.create()
    committed = await client.wait_for("input_audio_buffer.committed", timeout=5)
    completed = await client.wait_for("conversation.item.input_audio_transcription.completed", timeout=15)
    assert completed.item_id == committed.item_id and {"capital", "france"} <= words(completed.transcript)
    done = await client.wait_for("response.done", timeout=30)
    assert done.response.status == "completed"
    assert done.response.output[0].content[0].transcript.strip()
    assert np.abs(pcm(client.audio(done.response.id))).max() > 1000
    # An empty buffer cannot be committed.
    await client.connection.input_audio_buffer.commit(event_id="empty_commit")
    error = await client.wait_for("error", timeout=5)
    assert error.error.code == "input_audio_buffer_commit_empty" and error.error.event_id == "empty_commit"
    await client.close()


async def test_text_in_audio_out(server):
    client = await RealtimeClient.connect(server)
    await client.wait_for("session.created", timeout=10)
    await client.connection.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello to me."}]}
    )
    await client.connection.response.create()
    added = await client.wait_for("conversation.item.added", lambda e: e.item.role == "user", timeout=5)
    assert added.item.content[0].text == "Say hello to me."
    done = await client.wait_for("response.done", timeout=30)
    assert done.response.status == "completed"
    assert done.response.output[0].content[0].transcript.strip()
    assert np.abs(pcm(client.audio(done.response.id))).max() > 1000
    await client.close()


async def test_mulaw_in_and_out_at_8_khz(server):
    client = await RealtimeClient.connect(server)
    await client.wait_for("session.created", timeout=10)
    await client.connection.session.update(
        session={
            "type": "realtime",
            "audio": {"input": {"format": {"type": "audio/pcmu"}}, "output": {"format": {"type": "audio/pcmu"}}},
        }
    )
    updated = await client.wait_for("session.updated", timeout=10)
    assert updated.session.audio.input.format.type == "audio/pcmu"
    await client.stream(
        np.concatenate([speech("What is the capital of France?", 8000), silence(0.3, 8000)]), 8000, mulaw=True
    )
    streaming = asyncio.create_task(client.stream(silence(6.0, 8000), 8000, mulaw=True))
    completed = await client.wait_for("conversation.item.input_audio_transcription.completed", timeout=15)
    assert {"capital", "france"} <= words(completed.transcript)
    done = await client.wait_for("response.done", timeout=30)
    await streaming
    data = client.audio(done.response.id)
    audio = mulaw_decode(data)
    assert np.abs(audio).max() > 1000
    transcript = done.response.output[0].content[0].transcript
    # One byte per 8 kHz sample: about a third of a second per spoken word, not three times that.
    assert 0.1 < len(data) / 8000 / max(1, len(transcript.split())) < 1.0
    await client.close()


async def test_bad_input_gets_errors_and_the_session_goes_on(server):
    client = await RealtimeClient.connect(server)
    await client.wait_for("session.created", timeout=10)
    send = client.connection.send_raw
    await send("{not json")
    await send(json.dumps({"type": "no.such.event", "event_id": "e1"}))
    await send(json.dumps({"type": "input_audio_buffer.append", "audio": "%%%", "event_id": "e2"}))
    await send(
        json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"abc").decode(), "event_id": "e3"})
    )
    await send(
        json.dumps(
            {
                "type": "session.update",
                "event_id": "e4",
                "session": {"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
            }
        )
    )
    await send(
        json.dumps(
            {
                "type": "session.update",
                "event_id": "e5",
                "session": {"type": "realtime", "audio": {"output": {"voice": "alloy"}}},
            }
        )
    )
    await client.connection.response.cancel(event_id="e6")
    await send(json.dumps({"type": "session.update", "event_id": "e8", "session": {"instructions": "Be rude."}}))
    errors = {}
    for _ in range(100):
        errors = {e.error.event_id: e.error for e in client.events("error")}
        if len(errors) >= 8:
            break
        await asyncio.sleep(0.05)
    assert {k: e.code for k, e in errors.items()} == {
        None: "invalid_json",
        "e1": "unknown_event",
        "e2": "invalid_audio",
        "e3": "invalid_audio",
        "e4": "unsupported_audio_format",
        "e5": "invalid_voice",
        "e6": "response_cancel_not_active",
        "e8": "option_not_allowed",  # the server was not started with --allow-client-prompt
    }
    assert all(e.type == "invalid_request_error" and e.message for e in errors.values())
    assert client.events("session.updated")[-1].session.audio.output.voice == VOICE  # kept
    assert client.events("session.updated")[-1].session.instructions != "Be rude."
    # A second response while one runs is refused; the first goes on.
    await client.connection.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is two plus two?"}]}
    )
    await client.connection.response.create()
    await client.wait_for("response.created", timeout=10)
    await asyncio.sleep(1.1)  # the text item and the request took the text-turn burst: a request now is within it
    await client.connection.response.create(event_id="e7")
    busy = await client.wait_for("error", lambda e: e.error.event_id == "e7", timeout=5)
    assert busy.error.code == "conversation_already_has_active_response"
    done = await client.wait_for("response.done", timeout=30)
    assert done.response.status == "completed"
    assert len(client.events("response.created")) == 1
    await client.close()


@pytest.fixture
async def story_server():
    """A server whose LLM is a scripted endpoint that tells STORY to every question, and records the prompts.

    Its clients may set the system prompt (``instructions``).
    """
    endpoint = await StoryEndpoint().start()
    # Started in a thread: the endpoint runs on this event loop and must answer the warm-up meanwhile.
    process, base_url, log_file = await asyncio.to_thread(
        start_server, "--llm", "openai", "--llm-url", endpoint.url, "--allow-client-prompt"
    )
    yield base_url, endpoint
    stop_server(process, log_file)
    await endpoint.stop()


class StoryEndpoint(ScriptedEndpoint):
    async def _chat(self, behaviour: str, reader, writer) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
        )
        for word in STORY.split(" "):
            delta = json.dumps({"choices": [{"index": 0, "delta": {"content": word + " "}}]})
            data = f"data: {delta}\n\n".encode()
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
        writer.write(b"%x\r\n%s\r\n" % (len(b"data: [DONE]\n\n"), b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()


async def test_barge_in_cancels_the_answer_and_truncate_shortens_the_history(story_server):
    base_url, endpoint = story_server
    # Synthesized before the answer starts: on a busy machine, synthesized once it had played 2 s, it came after
    # the answer's end.
    interruption = np.concatenate([speech("Stop, please wait a moment.", 24000), silence(3.0, 24000)])
    client = await RealtimeClient.connect(base_url)
    await client.wait_for("session.created", timeout=10)
    await client.connection.session.update(session={"type": "realtime", "instructions": "You tell stories."})
    await client.wait_for("session.updated", timeout=10)
    microphone = asyncio.create_task(client.stream(silence(4.0, 24000)))
    await client.connection.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Tell me a story."}]}
    )
    await client.connection.response.create(response={"instructions": "Tell one about a knight."})
    created = await client.wait_for("response.created", timeout=10)
    item_id = (await client.wait_for("response.output_item.added", timeout=5)).item.id
    await client.wait_for(
        "response.output_audio.delta", lambda e: len(client.audio(created.response.id)) > 2 * 24000 * 2.0, timeout=15
    )
    await microphone
    microphone = asyncio.create_task(client.stream(interruption))
    started = await client.wait_for("input_audio_buffer.speech_started", timeout=10)
    # The client stops its playback at the user's speech, as Realtime clients do, having played only the first
    # second: the history keeps only those words. Sent then, the truncation precedes the interruption's answer.
    await client.connection.conversation.item.truncate(item_id=item_id, content_index=0, audio_end_ms=1000)
    done = await client.wait_for("response.done", timeout=10)
    assert done.response.id == created.response.id
    assert done.response.status == "cancelled" and done.response.status_details.reason == "turn_detected"
    heard = done.response.output[0].content[0].transcript
    assert heard and STORY.startswith(heard) and len(heard) < len(STORY)
    types = client.types()
    assert types.index("input_audio_buffer.speech_started") < types.index("response.done")
    stopped_at = next(at for at, e in client.received if e.type == "response.done")
    assert not [
        e
        for at, e in client.received
        if at > stopped_at and e.type == "response.output_audio.delta" and e.response_id == created.response.id
    ], "no audio of the cancelled answer after response.done"
    truncated = await client.wait_for("conversation.item.truncated", timeout=5)
    assert truncated.item_id == item_id and truncated.audio_end_ms == 1000
    # The interruption is a turn of its own: its answer's prompt shows the truncated history.
    await client.wait_for(
        "conversation.item.input_audio_transcription.completed", lambda e: e.item_id == started.item_id, timeout=15
    )
    await client.wait_for("response.created", lambda e: e.response.id != created.response.id, timeout=15)
    await microphone
    (story,) = [
        r["body"]["messages"] for r in endpoint.requests if r["body"]["messages"][-1]["content"] == "Tell me a story."
    ]
    assert story[0] == {"role": "system", "content": "Tell one about a knight."}  # this response's instructions
    prompt = endpoint.requests[-1]["body"]["messages"]
    assert prompt[0] == {"role": "system", "content": "You tell stories."}
    assert [m["role"] for m in prompt[-3:]] == ["user", "assistant", "user"]
    assert prompt[-3]["content"] == "Tell me a story."
    kept = prompt[-2]["content"]
    assert kept and STORY.startswith(kept) and len(kept) < len(heard), (kept, heard)
    assert {"stop", "wait"} <= words(prompt[-1]["content"])
    await client.close()


async def test_per_session_settings_do_not_leak(server):
    first = await RealtimeClient.connect(server)
    await first.wait_for("session.created", timeout=10)
    await first.connection.session.update(
        session={
            "type": "realtime",
            "max_output_tokens": 7,
            "audio": {
                "input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 900, "threshold": 0.7}}
            },
        }
    )
    updated = await first.wait_for("session.updated", timeout=10)
    detection = updated.session.audio.input.turn_detection
    assert (detection.silence_duration_ms, detection.threshold) == (900, 0.7)
    second = await RealtimeClient.connect(server)
    created = await second.wait_for("session.created", timeout=10)
    assert created.session.max_output_tokens == "inf"
    detection = created.session.audio.input.turn_detection
    assert (detection.silence_duration_ms, detection.threshold) != (900, 0.7)
    await first.close()
    await second.close()


async def test_the_auth_token_is_checked():
    from openai import AsyncOpenAI

    process, base_url, log_file = await asyncio.to_thread(start_server, "--auth-token", "s3cret")
    try:
        with pytest.raises(Exception) as refused:
            async with AsyncOpenAI(api_key="wrong", base_url=base_url + "/v1").realtime.connect(model="x"):
                pass
        assert "401" in str(refused.value)
        client = await RealtimeClient.connect(base_url, api_key="s3cret")
        await client.wait_for("session.created", timeout=10)
        await client.close()
    finally:
        stop_server(process, log_file)


async def test_the_openai_agents_realtime_runner_as_the_client(server, tmp_path):
    question = tmp_path / "question.pcm"
    question.write_bytes(float_to_pcm16(speech("What is the capital of France?", 24000)))
    result = await run_agents_client(server, str(question))
    # The SDK always sends its agent's instructions: refused by a server without --allow-client-prompt. Its
    # agent's tool is declared, and the embedded SmolLM2 says it cannot call tools; the session goes on.
    assert all("option_not_allowed" in e or "tools_unsupported" in e for e in result["errors"]), result["errors"]
    assert any("tools_unsupported" in e for e in result["errors"]) and not result["calls"]
    assert result["loudest"] > 1000
    assert {"capital", "france"} <= words(result["heard"])
    assert result["transcript"].strip()


AGENTS_PYTHON = Path(__file__).resolve().parent.parent / ".venv-agents" / "bin" / "python"


async def run_agents_client(base_url: str, question: str) -> dict:
    """The Agents SDK's realtime runner asks ``question`` (text, or a .pcm file it speaks): what it saw.

    In a venv of its own: openai-agents pins websockets<17, below this project's."""
    if not AGENTS_PYTHON.exists():
        message = f"{AGENTS_PYTHON} is missing: run scripts/setup-agents"
        if os.environ.get("VOICE_AGENT_REQUIRE_AGENTS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    url = base_url.replace("http://", "ws://") + "/v1/realtime?model=gpt-realtime"
    client = Path(__file__).with_name("agents_sdk_client.py")
    command = [str(AGENTS_PYTHON), str(client), url, VOICE, question]
    ran = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads(ran.stdout.splitlines()[-1])


WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather now in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def weather_model(body: dict) -> list:
    """A stand-in tool-calling model: asks for the weather in Paris, then says what the tool answered."""
    if not body.get("tools"):
        return ["Hello."]  # the server's warm-up
    if body["messages"][-1]["role"] == "tool":
        result = json.loads(last_tool_results(body)[-1])
        return [f"It is {result['sky']} ", f"and {result['celsius']} degrees ", "in Paris right now."]
    return [Call("get_weather", {"city": "Paris"})]


@pytest.fixture
def weather_server():
    """A server whose LLM is an OpenAI-compatible stand-in that calls a client's get_weather tool."""
    with ChatServer(weather_model) as chat:
        process, base_url, log_file = start_server("--llm", "openai", "--llm-url", chat.url)
        yield base_url, chat
        stop_server(process, log_file)


async def test_a_client_function_is_called_and_its_output_answered_in_speech(weather_server):
    base_url, chat = weather_server
    client = await RealtimeClient.connect(base_url)
    await client.wait_for("session.created", timeout=10)
    await client.connection.session.update(session={"type": "realtime", "tools": [WEATHER_TOOL], "tool_choice": "auto"})
    updated = await client.wait_for("session.updated", timeout=10)
    assert [t.name for t in updated.session.tools] == ["get_weather"]
    assert not client.events("error")
    await client.stream(np.concatenate([speech("What is the weather in Paris?", 24000), silence(0.3, 24000)]))
    microphone = asyncio.create_task(client.stream(silence(10.0, 24000)))
    arguments = await client.wait_for("response.function_call_arguments.done", timeout=30)
    assert arguments.name == "get_weather" and json.loads(arguments.arguments) == {"city": "Paris"}
    first = await client.wait_for("response.done", timeout=10)
    assert first.response.status == "completed"
    (call,) = [item for item in first.response.output if item.type == "function_call"]
    assert (call.name, call.call_id, json.loads(call.arguments)) == (
        "get_weather",
        arguments.call_id,
        {"city": "Paris"},
    )
    (call_done,) = [e.item for e in client.events("response.output_item.done") if e.item.type == "function_call"]
    assert call_done.call_id == call.call_id and call_done.status == "completed"
    assert not client.audio(first.response.id)  # the call alone: nothing said
    await client.connection.conversation.item.create(
        item={"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sunny", "celsius": 21}'}
    )
    await client.connection.response.create()
    added = await client.wait_for("conversation.item.added", lambda e: e.item.type == "function_call_output", timeout=5)
    assert added.item.call_id == call.call_id
    second = await client.wait_for("response.done", lambda e: e.response.id != first.response.id, timeout=30)
    assert second.response.status == "completed"
    transcript = second.response.output[0].content[0].transcript
    assert {"sunny", "21", "degrees"} <= words(transcript), transcript  # the answer uses the function's output
    assert np.abs(pcm(client.audio(second.response.id))).max() > 1000
    await microphone
    assert not client.events("error")
    # What the LLM was asked: the client's tool as a chat tool, then the call and its result in the history.
    asked = [r for r in chat.requests if r.get("tools")]
    assert asked[0]["tools"] == [
        {
            "type": "function",
            "function": {k: v for k, v in WEATHER_TOOL.items() if k != "type"},
        }
    ]
    history = asked[-1]["messages"]
    assert history[-2]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": call.arguments}
    assert history[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": '{"sky": "sunny", "celsius": 21}'}
    await client.close()


async def test_the_agents_sdk_realtime_runner_calls_a_function_tool_and_speaks_its_result(weather_server):
    base_url, chat = weather_server
    result = await run_agents_client(base_url, "What is the weather in Paris?")
    assert result["calls"] == ["Paris"]  # the SDK ran its @function_tool with the model's arguments
    types = result["types"]
    assert types.index("tool_start") < types.index("tool_end") < len(types) - 1 - types[::-1].index("audio")
    # The SDK always sends its agent's instructions: refused by a server without --allow-client-prompt.
    assert all("option_not_allowed" in e for e in result["errors"]), result["errors"]
    assert result["loudest"] > 1000 and {"sunny", "21"} <= words(result["transcript"])
    assert chat.requests[-1]["messages"][-1]["content"] == '{"sky": "sunny", "celsius": 21}'
