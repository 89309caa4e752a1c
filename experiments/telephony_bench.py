"""Measure recognition, endpointing and voice-to-voice latency on 8 kHz μ-law against the native 16 kHz path.

Starts a real server with the default models, then plays every question three
ways, one call at a time, at real-time pace:

  native-16k   the native protocol at 16 kHz PCM (the reference);
  native-8k-ulaw  the native protocol at 8 kHz, audio through a G.711 μ-law round trip:
               the same session path as a phone call, with transcripts and metrics visible;
  twilio       a simulated Twilio call on /twilio (μ-law media messages); the server's
               per-turn metrics are read from its log, as Twilio carries none.

Voice-to-voice is reported twice: by the server (last speech sample arrived →
first answer frame sent) and by the client (frame with the last speech sample
sent → first answer frame received).
Run: .venv/bin/python experiments/telephony_bench.py [--repeats N] [--jfk PATH/jfk.flac]
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import re
import statistics
import time
from pathlib import Path

import numpy as np

from voice_agent.audio import StreamResampler, float_to_int16, mulaw_decode, mulaw_encode, resample
from voice_agent.bench.speech import silence, speech
from voice_agent.protocols.events import AgentAudio, Metrics, OutputEvent, Transcript
from voice_agent.replay.local_server import LocalServer
from voice_agent.replay.measure import normalized_words, word_error_rate
from voice_agent.replay.transport import ClientCodec, Connection, NativeClientCodec, TwilioClientCodec, stream

QUESTIONS = [
    "What is the capital of France?",
    "How many days are there in a week?",
    "Can you recommend a good book to read?",
    "What is the weather usually like in summer?",
    "Tell me a fun fact about elephants.",
    "Why is the sky blue?",
    "What should I cook for dinner tonight?",
    "How far away is the moon?",
]
CONDITIONS = ("native-16k", "native-8k-ulaw", "twilio")
JFK_TEXT = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
SPEECH_LEVEL = 0.01


def mulaw_round_trip(audio: np.ndarray) -> np.ndarray:
    return mulaw_decode(mulaw_encode(float_to_int16(audio))).astype(np.float32) / 32768.0


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(word errors, reference words)."""
    count = len(normalized_words(reference))
    return round(word_error_rate(reference, hypothesis) * count), count


def last_speech_frame(audio: np.ndarray, rate: int) -> int:
    loud = np.flatnonzero(np.abs(audio) > SPEECH_LEVEL)
    return int(loud[-1]) // (rate // 50)


class Call:
    """One session over a replay client codec: what the agent sent, as output events with arrival times."""

    def __init__(self, connection: Connection, rate: int) -> None:
        self.connection = connection
        self.rate = rate
        self.received: list[tuple[float, OutputEvent]] = []
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str, codec: ClientCodec, rate: int) -> Call:
        return cls(await Connection.open(url, codec, rate), rate)

    async def _read(self) -> None:
        while (item := await self.connection.receive()) is not None:
            at, message = item
            self.received += [(at, event) for event in self.connection.codec.receive(message)]

    async def stream(self, audio: np.ndarray) -> None:
        await stream(self.connection, audio, self.rate)

    async def first(self, kind: type, timeout: float) -> tuple[float, OutputEvent]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next(((at, event) for at, event in self.received if isinstance(event, kind)), None)
            if found is not None:
                return found
            await asyncio.sleep(0.01)
        raise TimeoutError(f"no {kind.__name__} within {timeout} s")

    async def close(self) -> None:
        await self.connection.close()
        self._reader.cancel()


async def run_native(url: str, text: str, rate: int, ulaw: bool) -> dict:
    audio = speech(text, rate)
    if ulaw:
        audio = mulaw_round_trip(audio)
    client = await Call.open(url, NativeClientCodec(), rate)
    sent_at = time.monotonic()
    await client.stream(np.concatenate([audio, silence(0.2, rate)]))
    speech_end = sent_at + last_speech_frame(audio, rate) * 0.02
    line = asyncio.create_task(client.stream(silence(20.0, rate)))
    try:
        _, metrics = await client.first(Metrics, 30)
        first_audio, _ = await client.first(AgentAudio, 30)
        finals = [e.text for _, e in client.received if isinstance(e, Transcript) and e.role == "user" and e.final]
        heard = finals[-1] if finals else ""  # an early endpoint shows as a later turn number
    finally:
        line.cancel()
        await client.close()
    assert isinstance(metrics, Metrics)
    return {"heard": heard, "client_v2v_ms": (first_audio - speech_end) * 1000, **metrics.values}


async def run_twilio(base_url: str, text: str, log_path: Path) -> dict:
    audio = speech(text, 8000)
    log_start = log_path.stat().st_size
    client = await Call.open(base_url.replace("http://", "ws://") + "/twilio", TwilioClientCodec(), 8000)
    sent_at = time.monotonic()
    await client.stream(np.concatenate([audio, silence(0.2, 8000)]))
    speech_end = sent_at + last_speech_frame(audio, 8000) * 0.02
    line = asyncio.create_task(client.stream(silence(20.0, 8000)))
    try:
        first_audio, _ = await client.first(AgentAudio, 30)
        metrics = None
        for _ in range(100):
            with open(log_path) as log:
                log.seek(log_start)
                found = re.findall(r"metrics (\{.*\})", log.read())
            if found:
                metrics = ast.literal_eval(found[0])
                break
            await asyncio.sleep(0.05)
    finally:
        line.cancel()
        await client.close()
    return {"client_v2v_ms": (first_audio - speech_end) * 1000, **(metrics or {})}


def offline(jfk: str | None) -> None:
    """Engine level, no server: Whisper and Silero on the same clip at 16 kHz and through 8 kHz μ-law."""
    import soundfile

    from voice_agent.engines.stt import WhisperSTT
    from voice_agent.engines.vad import WINDOW, SileroVAD

    stt, vad = WhisperSTT(), SileroVAD()
    clips = [(text, speech(text, 16000), speech(text, 8000)) for text in QUESTIONS]
    if jfk:
        audio, rate = soundfile.read(jfk, dtype="float32")
        audio = audio.mean(axis=1) if audio.ndim == 2 else audio
        clips.append((JFK_TEXT, resample(audio, rate, 16000), resample(audio, rate, 8000)))

    def as_the_session_hears_a_call(audio_8k: np.ndarray) -> np.ndarray:
        upsampler = StreamResampler(8000, 16000)
        coded = mulaw_round_trip(audio_8k)
        return np.concatenate([upsampler.process(coded[i : i + 160]) for i in range(0, len(coded), 160)])

    def speech_span_ms(audio: np.ndarray) -> tuple[float, float]:
        speech_windows = np.flatnonzero(np.array(vad.stream().process(audio)) >= 0.5)
        return speech_windows[0] * WINDOW / 16, (speech_windows[-1] + 1) * WINDOW / 16

    totals = {"16k": [0, 0], "8k-ulaw": [0, 0]}
    print("offline: clip | VAD speech start/end ms 16k vs 8k-ulaw | transcript 16k | transcript 8k-ulaw")
    for text, clean, call_8k in clips:
        call = as_the_session_hears_a_call(call_8k)
        heard = {"16k": stt.transcribe_blocking(clean), "8k-ulaw": stt.transcribe_blocking(call)}
        for key, hypothesis in heard.items():
            errors, count = word_errors(text, hypothesis)
            totals[key][0] += errors
            totals[key][1] += count
        (s16, e16), (s8, e8) = speech_span_ms(clean), speech_span_ms(call)
        print(
            f"  {text[:32]!r:36} {s16:5.0f}/{e16:5.0f} vs {s8:5.0f}/{e8:5.0f} | {heard['16k']!r} | {heard['8k-ulaw']!r}"
        )
    for key, (errors, count) in totals.items():
        print(f"offline word error rate {key}: {errors / count:.1%} ({errors}/{count} words)")


def summary(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):7.0f} (p90 {np.percentile(values, 90):6.0f}, n={len(values)})"


async def main(repeats: int, jfk: str | None) -> None:
    offline(jfk)
    if repeats == 0:
        return
    log_path = Path("telephony-bench-server.log")
    log_file = open(log_path, "w")
    server = LocalServer([], log_file, ready_timeout=180)
    base_url = server.base_url
    ws_url = server.ws_url
    results: dict[str, list[dict]] = {c: [] for c in CONDITIONS}
    try:
        for text in QUESTIONS:
            speech(text, 16000), speech(text, 8000)  # synthesize before timing anything
        for round_ in range(repeats):
            for text in QUESTIONS:
                for condition in CONDITIONS:  # interleaved, so load changes hit every condition alike
                    if condition == "twilio":
                        result = await run_twilio(base_url, text, log_path)
                    else:
                        result = await run_native(
                            ws_url, text, 8000 if "8k" in condition else 16000, "ulaw" in condition
                        )
                    result["text"] = text
                    results[condition].append(result)
                    print(
                        f"{round_} {condition:15s} v2v server {result.get('voice_to_voice_ms')} client {result['client_v2v_ms']:.0f}"
                        f" endpoint {result.get('endpoint_ms')} heard {result.get('heard', '')!r}",
                        flush=True,
                    )
                    await asyncio.sleep(1.0)
    finally:
        server.stop(timeout=20)
        log_file.close()

    print(
        "\nmedian ms (p90, n)        server v2v              client v2v              endpoint                stt final"
    )
    for condition, rows in results.items():

        def pick(key: str, rows: list = rows) -> list:
            return [r[key] for r in rows if r.get(key) is not None]

        print(
            f"{condition:15s} {summary(pick('voice_to_voice_ms'))}  {summary(pick('client_v2v_ms'))}"
            f"  {summary(pick('endpoint_ms'))}  {summary(pick('stt_final_ms'))}"
        )
    for condition in ("native-16k", "native-8k-ulaw"):
        errors = [word_errors(r["text"], r["heard"]) for r in results[condition]]
        exact = sum(1 for r in results[condition] if normalized_words(r["text"]) == normalized_words(r["heard"]))
        print(
            f"{condition}: word error rate {sum(e for e, _ in errors) / sum(n for _, n in errors):.1%}, "
            f"{exact}/{len(errors)} transcripts exact, one committed turn per question: "
            f"{sum(1 for r in results[condition] if r.get('turn') == 1)}/{len(errors)}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--jfk", help="the JFK recording (jfk.flac), compared offline too")
    args = parser.parse_args()
    asyncio.run(main(args.repeats, args.jfk))
