"""The replay's measurement code on synthetic signals with known timings.

"Within one frame" is the bar: 20 ms. The last tests run the real runner
against a fake agent on loopback whose answer delay is known exactly.
"""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
import soundfile

from voice_agent.protocols.events import AgentAudio, Clear, Error, Mark, Metrics, Transcript
from voice_agent.protocols.native import NativeProtocol
from voice_agent.replay.measure import (
    AudioIn,
    MessageIn,
    barge_in_stop,
    distribution,
    dry_spells,
    first_voiced_audio,
    measure_turn,
    playback_intervals,
    send_time,
    server_stages,
    speech_bounds,
    word_error_rate,
)
from voice_agent.replay.report import Thresholds, check, summarise
from voice_agent.replay.runner import Options, analyse, run_level
from voice_agent.replay.script import Script, ScriptError, StartRule, Turn, from_files, load_script, parse_start
from voice_agent.replay.transport import NativeClientCodec

FRAME_S = 0.02
RATE = 16000


def tone(seconds: float, rate: int = RATE, amplitude: float = 0.3, hz: float = 220.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    # A vowel-like tone with a slow envelope, so its edges are not instantaneous.
    return (amplitude * np.sin(2 * np.pi * hz * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


def gap(seconds: float, rate: int = RATE) -> np.ndarray:
    return np.zeros(int(seconds * rate), np.float32)


def noise(samples: np.ndarray, level_db: float, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (samples + rng.normal(0, 10 ** (level_db / 20), len(samples))).astype(np.float32)


# Speech bounds.


@pytest.mark.parametrize("rate", [8000, 16000, 44100, 48000])
def test_speech_bounds_in_digital_silence(rate):
    audio = np.concatenate([gap(0.5, rate), tone(1.2, rate), gap(0.7, rate)])
    bounds = speech_bounds(audio, rate)
    assert abs(bounds.start / rate - 0.5) < FRAME_S
    assert abs(bounds.end / rate - 1.7) < FRAME_S


def test_speech_bounds_over_room_noise_span_a_mid_sentence_pause():
    # "I'd like a table for ... four people": the end is after the second part.
    audio = noise(np.concatenate([gap(0.3), tone(1.0), gap(0.9), tone(0.6, hz=180), gap(0.8)]), -45)
    bounds = speech_bounds(audio, RATE)
    assert abs(bounds.start / RATE - 0.3) < FRAME_S
    assert abs(bounds.end / RATE - 2.8) < FRAME_S


def test_a_click_after_speech_is_not_speech():
    audio = np.concatenate([gap(0.2), tone(1.0), gap(0.5), tone(0.01, amplitude=0.9), gap(0.5)])
    assert abs(speech_bounds(audio, RATE).end / RATE - 1.2) < FRAME_S


def test_silence_has_no_speech():
    assert speech_bounds(gap(1.0), RATE) is None
    assert speech_bounds(noise(gap(1.0), -70), RATE) is None
    assert speech_bounds(np.zeros(10, np.float32), RATE) is None


def test_send_time_is_that_of_the_frame_holding_the_sample():
    times = [10.0 + 0.02 * i for i in range(50)]
    assert send_time(times, 320, 0) == 10.0
    assert send_time(times, 320, 319) == 10.0
    assert send_time(times, 320, 320) == pytest.approx(10.02)
    assert send_time(times, 320, 10**9) == times[-1]


# What the agent sent.


def agent_frames(start: float, seconds: float, silent_frames: int = 0, peak: float = 0.2) -> list[AudioIn]:
    count = int(round(seconds / FRAME_S))
    return [AudioIn(start + i * FRAME_S, FRAME_S, 0.0 if i < silent_frames else peak) for i in range(count)]


def test_first_voiced_audio_skips_leading_silence_and_earlier_answers():
    received = agent_frames(1.0, 0.5) + agent_frames(3.0, 1.0, silent_frames=4)
    assert first_voiced_audio(received, after=2.0) == pytest.approx(3.08)
    assert first_voiced_audio(received, after=2.0, before=3.05) is None
    assert first_voiced_audio(received, after=5.0) is None


def test_barge_in_stop_at_clear():
    received = agent_frames(1.0, 2.0) + [MessageIn(2.33, "clear")] + agent_frames(4.0, 1.0)
    received.sort(key=lambda item: item.at)
    stop, cleared = barge_in_stop(received, onset=2.0)
    assert cleared and stop == pytest.approx(2.33)


def test_barge_in_stop_without_clear_is_the_last_frame_of_the_interrupted_answer():
    received = agent_frames(1.0, 1.5) + agent_frames(4.0, 1.0)
    stop, cleared = barge_in_stop(received, onset=2.0)
    assert not cleared and abs(stop - 2.48) < FRAME_S


def test_an_agent_that_falls_silent_before_it_clears_stopped_at_its_last_frame():
    received = agent_frames(1.0, 1.3) + [MessageIn(2.6, "clear")] + agent_frames(4.0, 1.0)
    stop, cleared = barge_in_stop(received, onset=2.0)
    assert cleared and abs(stop - 2.28) < FRAME_S


def test_no_barge_in_when_the_agent_was_silent():
    assert barge_in_stop(agent_frames(1.0, 0.5) + agent_frames(4.0, 1.0), onset=3.0) is None


def test_no_barge_in_once_the_answer_has_played_out():
    # The server sends with a lead: 0.5 s of audio, all received by 1.3 s, plays until 1.5 s.
    received = [AudioIn(1.0, FRAME_S, 0.2) for _ in range(10)] + agent_frames(1.02, 0.3)
    assert barge_in_stop(received, onset=1.45) == (pytest.approx(1.3), False)
    assert barge_in_stop(received, onset=1.6) is None


def test_a_stall_between_chunks_is_still_the_same_answer():
    received = agent_frames(1.0, 1.0) + [*agent_frames(2.3, 0.2), MessageIn(2.45, "clear"), *agent_frames(2.46, 0.5)]
    assert barge_in_stop(received, onset=2.1) == (pytest.approx(2.45), True)


def test_playback_intervals_follow_the_frames_and_stop_at_clear():
    # Ten frames arrive at once (the server's lead), then paced ones.
    burst = [AudioIn(1.0, FRAME_S, 0.2) for _ in range(10)]
    paced = [AudioIn(1.0 + 0.02 * i, FRAME_S, 0.2) for i in range(1, 20)]
    intervals = playback_intervals(burst + paced + [MessageIn(1.3, "clear")] + agent_frames(3.0, 0.4))
    assert intervals[0] == pytest.approx((1.0, 1.3))
    assert intervals[1] == pytest.approx((3.0, 3.4))


def test_dry_spells_are_gaps_inside_an_answer():
    user_final = MessageIn(5.0, "transcript", {"role": "user", "text": "And you?", "final": True})
    received = [
        *agent_frames(1.0, 0.8),  # the first chunk
        *agent_frames(2.3, 1.0),  # the second came 500 ms after the first had played
        *agent_frames(3.32, 0.5),  # 20 ms: a glitch, not a dry spell
        user_final,
        *agent_frames(5.5, 0.4),
        MessageIn(5.9, "clear"),  # the next answer, interrupted
        *agent_frames(6.5, 0.5),  # an answer after the interruption
    ]
    assert dry_spells(received) == [pytest.approx(0.5)]


def test_measure_turn_with_known_timings():
    speech_start, speech_end = 0.5, 2.0
    received = [
        MessageIn(1.1, "transcript", {"role": "user", "text": "I'd like a", "final": False}),
        MessageIn(2.45, "transcript", {"role": "user", "text": "I'd like a table for four.", "final": True}),
        *agent_frames(2.8, 1.0, silent_frames=2),
        MessageIn(
            2.801,
            "metrics",
            {
                "voice_to_voice_ms": 790.0,
                "endpoint_ms": 350,
                "tts_ttfa_ms": 100,
                "first_chunk_ms": 150,
                "llm_ttft_ms": 60,
            },
        ),
        MessageIn(3.9, "transcript", {"role": "agent", "text": "Sure.", "final": True}),
    ]
    received.sort(key=lambda item: item.at)
    figures = measure_turn(
        received,
        sent_at=0.4,
        speech_start_at=speech_start,
        speech_end_at=speech_end,
        until=5.0,
        expect="I'd like a table for four people.",
    )
    assert abs(figures["voice_to_voice_ms"] - 840) <= 20
    assert figures["server_voice_to_voice_ms"] == 790.0
    assert figures["client_minus_server_ms"] == pytest.approx(figures["voice_to_voice_ms"] - 790.0)
    assert figures["first_transcript_ms"] == pytest.approx(600)
    assert figures["final_transcript_ms"] == pytest.approx(450)
    assert figures["transcript"] == "I'd like a table for four."
    assert figures["wer"] == pytest.approx(1 / 7, abs=1e-3)
    assert figures["answer"] == "Sure."
    assert figures["agent_spoke_during_turn"] is False
    assert figures["barge_in_stop_ms"] is None


def test_a_reply_that_cut_in_on_a_pause_is_flagged_and_the_transcripts_joined():
    received = [
        MessageIn(1.5, "transcript", {"role": "user", "text": "I'd like a table for.", "final": True}),
        *agent_frames(1.9, 0.3),
        MessageIn(2.25, "clear"),
        MessageIn(3.5, "transcript", {"role": "user", "text": "Four people.", "final": True}),
        *agent_frames(4.0, 0.5),
    ]
    received.sort(key=lambda item: item.at)
    figures = measure_turn(received, sent_at=0.0, speech_start_at=0.2, speech_end_at=3.0, until=6.0)
    assert figures["agent_spoke_during_turn"] is True
    assert figures["transcript"] == "I'd like a table for. Four people."
    assert figures["voice_to_voice_ms"] == pytest.approx(1000)


def test_a_later_final_replaces_an_earlier_one_when_the_agent_never_spoke():
    received = [
        MessageIn(1.5, "transcript", {"role": "user", "text": "I'd like a table for.", "final": True}),
        MessageIn(3.5, "transcript", {"role": "user", "text": "I'd like a table for four people.", "final": True}),
        *agent_frames(4.0, 0.5),
    ]
    figures = measure_turn(received, sent_at=0.0, speech_start_at=0.2, speech_end_at=3.0, until=6.0)
    assert figures["transcript"] == "I'd like a table for four people."


def test_server_stages_work_back_from_the_first_audio():
    stages = server_stages(
        {
            "voice_to_voice_ms": 900.0,
            "endpoint_ms": 350.0,
            "tts_ttfa_ms": 120.0,
            "first_chunk_ms": 300.0,
            "llm_ttft_ms": 80.0,
        }
    )
    assert stages == {"endpoint": 350.0, "first_tts_audio": 900.0, "stt_final": 480.0, "llm_first_token": 560.0}
    assert server_stages({}) == {}


def test_word_error_rate():
    assert word_error_rate("Hello, are you open tonight?", "hello are you open tonight") == 0.0
    assert word_error_rate("a table for four people", "a table for people") == pytest.approx(0.2)
    assert word_error_rate("a b c", "a x c d") == pytest.approx(2 / 3)
    assert word_error_rate("", "") == 0.0
    assert word_error_rate("one", "") == 1.0


def test_distribution():
    assert distribution([None, 100.0, 200.0, 300.0]) == {"n": 3, "p50": 200.0, "p95": 290.0, "max": 300.0}
    assert distribution([None]) == {"n": 0, "p50": None, "p95": None, "max": None}


# Scripts.


def test_start_rules():
    assert parse_start("after-reply") == StartRule("after-reply", 800)
    assert parse_start("after_reply:1500", 0) == StartRule("after-reply", 1500)
    assert parse_start("barge-in: 700ms") == StartRule("barge-in", 700)
    assert parse_start("delay:0") == StartRule("delay", 0)
    for bad in ("barge-in", "later", "delay:-5", "delay:soon"):
        with pytest.raises(ScriptError):
            parse_start(bad)


def test_any_rate_and_channel_count_is_converted(tmp_path):
    stereo = np.stack([np.concatenate([gap(0.4, 44100), tone(1.0, 44100), gap(0.5, 44100)])] * 2, axis=1)
    path = tmp_path / "stereo.wav"
    soundfile.write(path, stereo, 44100)
    turn = from_files([str(path)], 16000, parse_start("after-reply")).turns[0]
    assert turn.audio.ndim == 1 and turn.rate == 16000
    assert abs(turn.duration_s - 1.9) < 0.001
    assert abs(turn.speech.end / 16000 - 1.4) < FRAME_S


def test_script_errors_say_what_is_wrong(tmp_path):
    soundfile.write(tmp_path / "a.wav", tone(0.5), RATE)
    soundfile.write(tmp_path / "quiet.wav", gap(0.5), RATE)
    cases = {
        "turns: []": "non-empty list",
        "turns: [{start: delay:100}]": "needs a 'file'",
        "turns: [{file: a.wav, start: soon}]": "start rule",
        "turns: [{file: a.wav, colour: red}]": "unknown keys colour",
        "turns: [{file: missing.wav}]": "cannot read audio",
        "turns: [{file: quiet.wav}]": "no speech found",
        "turns: [{file: a.wav, expect: [1]}]": "'expect' must be text",
        "turns: [": "invalid YAML",
    }
    for text, message in cases.items():
        path = tmp_path / "script.yaml"
        path.write_text(text)
        with pytest.raises(ScriptError, match=message):
            load_script(str(path), RATE)
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps({"turns": [{"file": "a.wav", "start": "barge-in:300", "expect": "hi", "name": "first"}]})
    )
    turn = load_script(str(path), RATE).turns[0]
    assert (turn.name, turn.start, turn.expect) == ("first", StartRule("barge-in", 300), "hi")


# The client codec against the server's.


def test_client_codec_reads_what_the_server_codec_writes():
    server, client = NativeProtocol(), NativeClientCodec()
    samples = (np.arange(320, dtype=np.float32) / 320 - 0.5) * 0.5
    for event in (
        Transcript("user", "hello", True),
        Clear(),
        Mark("1.0"),
        Metrics({"turn": 1, "voice_to_voice_ms": 812.3}),
        Error("x", "y"),
    ):
        assert client.receive(server.send(event)) == [event]
    (audio,) = client.receive(server.send(AgentAudio(samples)))
    assert np.allclose(audio.samples, samples, atol=1 / 32768)
    assert client.receive("nonsense")[0].code == "invalid_json"
    assert client.receive(b"\x00")[0].code == "odd_length_audio"
    (started,) = server.receive_text(client.start(24000)[0])
    assert started.sample_rate == 24000
    assert server.receive_text(client.mark_played("3.1")[0])[0].name == "3.1"


def test_thresholds():
    turn = {
        "voice_to_voice_ms": 900.0,
        "wer": 0.1,
        "agent_spoke_during_turn": False,
        "start": "after-reply:800",
        "barge_in_cleared": None,
        **{
            k: None
            for k in (
                "server_voice_to_voice_ms",
                "client_minus_server_ms",
                "first_transcript_ms",
                "final_transcript_ms",
                "barge_in_stop_ms",
            )
        },
    }
    runs = [
        {
            "concurrency": 1,
            "failure": None,
            "turns": [turn, {**turn, "voice_to_voice_ms": 1100.0}],
            "dry_spells_ms": [250.0],
        }
    ]
    summary = summarise(runs)
    assert summary["1"]["dry_spells_ms"]["n"] == 1
    assert summary["1"]["voice_to_voice_ms"]["p50"] == 1000.0
    assert check(summary, Thresholds(max_p50_ms=1000)) == []
    assert check(summary, Thresholds(max_p50_ms=999)) == ["1 session(s): voice-to-voice p50 1000 ms > 999 ms"]
    assert check(summary, Thresholds(max_wer=0.05))
    runs[0]["turns"].append({**turn, "voice_to_voice_ms": None})
    assert "got no answer" in check(summarise(runs), Thresholds(max_p95_ms=10_000))[0]


# The runner against a fake agent with a known answer delay.

ANSWER_DELAY_S = 0.6
CLEAR_AFTER_S = 0.15


async def fake_agent(websocket):
    """Answers ANSWER_DELAY_S after the frame holding the end of speech arrived, 1.5 s of audio
    paced in real time with two silent frames first; clears CLEAR_AFTER_S into interrupting speech."""
    frame = int(RATE * FRAME_S)
    last_speech_at = None
    speech_since = None
    answering: asyncio.Task | None = None

    async def answer(speech_end_at: float) -> None:
        await asyncio.sleep(max(0.0, speech_end_at + ANSWER_DELAY_S - time.monotonic()))
        sent_first = time.monotonic()
        await websocket.send(
            json.dumps(
                {"type": "metrics", "turn": 1, "voice_to_voice_ms": round((sent_first - speech_end_at) * 1000, 1)}
            )
        )
        for i in range(75):
            level = 0.0 if i < 2 else 0.3
            await websocket.send((np.full(frame, level * 32767, np.int16)).tobytes())
            await asyncio.sleep(max(0.0, sent_first + (i + 1) * FRAME_S - time.monotonic()))
        await websocket.send(json.dumps({"type": "transcript", "role": "agent", "text": "Answer.", "final": True}))

    async for message in websocket:
        if not isinstance(message, bytes):
            continue
        now = time.monotonic()
        loud = np.abs(np.frombuffer(message, np.int16)).max(initial=0) > 300
        if loud:
            last_speech_at = now
            speech_since = speech_since or now
            if answering is not None and not answering.done() and now - speech_since >= CLEAR_AFTER_S:
                answering.cancel()
                await websocket.send(json.dumps({"type": "clear"}))
        elif last_speech_at is not None and now - last_speech_at > 0.3:
            speech_since = None
            if answering is None or answering.done():
                answering = asyncio.create_task(answer(last_speech_at))
            last_speech_at = None


def bursts_script(rate: int = RATE) -> Script:
    # The fake agent's speech detector is "any loud sample", so turns are tone bursts.
    turns = []
    for name, start, audio in (
        ("first", "after-reply:300", np.concatenate([gap(0.2), tone(0.8), gap(0.2)])),
        ("paused", "after-reply:300", np.concatenate([tone(0.5), gap(0.2), tone(0.4), gap(0.1)])),
        ("interrupt", "barge-in:500", tone(0.6)),
    ):
        bounds = speech_bounds(audio, rate)
        turns.append(Turn(name, name, audio, rate, parse_start(start), bounds))
    return Script(tuple(turns), rate, "")


@pytest.mark.wallclock
async def test_runner_measures_a_known_answer_delay_and_barge_in():
    import websockets

    async with websockets.serve(fake_agent, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        options = Options(f"ws://127.0.0.1:{port}/ws", lead_in_ms=200, tail_ms=200, reply_timeout_s=5)
        traces = await run_level(bursts_script(), options, 2, 2, 0.1, lambda: None)
    runs = [analyse(trace) for trace in traces]
    assert [trace.failure for trace in traces] == [None] * 4
    answered = [turn for run in runs for turn in run["turns"][:2]]
    interrupts = [run["turns"][2] for run in runs]
    # The fake answers 600 ms after the frame holding the end of speech arrived, and its first
    # two frames are silent: 640 ms at the client, 40 ms more than the fake's own figure. The
    # CPU is shared with the fake agent in this process, so one turn may be late; the median may not.
    assert abs(np.median([t["voice_to_voice_ms"] for t in answered]) - 640) <= 20, answered
    assert abs(np.median([t["client_minus_server_ms"] for t in answered]) - 40) <= 20, answered
    assert all(t["answer"] == "Answer." and not t["agent_spoke_during_turn"] for t in answered)
    assert all(t["barge_in_cleared"] is True for t in interrupts), interrupts
    assert abs(np.median([t["barge_in_stop_ms"] for t in interrupts]) - CLEAR_AFTER_S * 1000) <= 20 + 5, interrupts
    for run in runs:
        first, _, interrupt = run["turns"]
        assert interrupt["speech_start_s"] >= first["answer_s"]
        assert interrupt["agent_spoke_during_turn"]
        assert run["agent_speech_s"][0][0] == pytest.approx(first["answer_s"] - 2 * FRAME_S, abs=0.01)


def test_the_twilio_client_codec_speaks_to_the_server_codec():
    from voice_agent.protocols.events import AgentAudio, AudioReceived, Clear, Mark, MarkPlayed, SessionStarted
    from voice_agent.protocols.telephony import TWILIO, MediaStreamsProtocol
    from voice_agent.replay.transport import CODECS

    client, server = CODECS["twilio"](), MediaStreamsProtocol(TWILIO)
    with pytest.raises(ValueError):
        client.start(16000)
    events = [e for message in client.start(8000) for e in server.receive_text(message)]
    assert [type(e) for e in events] == [SessionStarted] and events[0].sample_rate == 8000
    tone = (0.3 * np.sin(np.arange(160) / 5)).astype(np.float32)
    [heard] = server.receive_text(client.audio(tone)[0])
    assert isinstance(heard, AudioReceived) and np.abs(heard.samples - tone).max() < 0.02
    [agent] = client.receive(server.send(AgentAudio(tone)))
    assert isinstance(agent, AgentAudio) and np.abs(agent.samples - tone).max() < 0.02
    assert client.receive(server.send(Mark("1.0"))) == [Mark("1.0")]
    assert client.receive(server.send(Clear())) == [Clear()]
    assert server.receive_text(client.mark_played("1.0")[0]) == [MarkPlayed("1.0")]
    assert [e.code for e in client.receive("not json")] == ["invalid_message"]


@pytest.mark.parametrize("transport", ["native", "twilio"])
def test_an_answer_is_over_at_its_final_transcript_or_without_transcripts_once_it_played_out(transport):
    from voice_agent.replay.runner import ANSWER_QUIET_S, RunTrace, SentTurn, _Run

    script = bursts_script(8000)
    run = _Run(script, Options("ws://unused", transport), RunTrace(1, 0, 0), lambda: None)
    now = time.monotonic()
    sent = SentTurn(script.turns[0], [now - 5.0 + i * FRAME_S for i in range(60)], 0)
    run.trace.received.append(AudioIn(now - 3.0, 1.0, 0.5))
    run._drains_at = now - 2.0  # played out two seconds ago
    if transport == "native":
        assert run._answer_finished(sent) is None  # no final transcript yet
        run.trace.received.append(MessageIn(now - 1.9, "transcript", {"role": "agent", "text": "Hi.", "final": True}))
        assert run._answer_finished(sent) == now - 1.9
    else:
        assert run._answer_finished(sent) == now - 2.0
        run._drains_at = time.monotonic() - ANSWER_QUIET_S / 2  # more of it came: not over yet
        assert run._answer_finished(sent) is None
