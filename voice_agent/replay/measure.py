"""Latency measurement from the client's side: pure functions, no I/O.

Every instant here is a client ``time.monotonic()`` reading: when a frame of
user audio was handed to the socket, or when a message from the agent was
read from it. The server's own figures are never used to compute the client's;
they are only put beside them.

User speech is found by an energy pass over the audio the client sent, in
10 ms windows: the end of speech is the end of the last window above the
threshold, mapped to the send time of the 20 ms frame that held its last
sample. The server maps its VAD's end of speech to the arrival time of the
frame holding that sample, so on loopback both sides time the same frame.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

import numpy as np

ANALYSIS_MS = 10
SILENCE_FLOOR_DB = -55.0  # quieter than this is silence, whatever the recording
NOISE_MARGIN_DB = 12.0  # speech stands this far above the recording's noise floor
PEAK_RANGE_DB = 20.0  # ...or is within this much of its peak, whichever is lower
MIN_BURST_MS = 30  # shorter bursts above the threshold are clicks, not speech
AGENT_VOICED_PEAK = 0.01  # about -40 dBFS: below this an agent frame is silence
# Paced agent frames come every 20 ms; a new answer needs STT, LLM and TTS
# first, so a longer silence than this on the wire separates two answers.
ANSWER_GAP_S = 0.5
# How long after falling silent a `clear` still belongs to the interrupted answer.
CLEAR_AFTER_SILENCE_S = 3.0


@dataclass(frozen=True)
class SpeechBounds:
    start: int  # first speech sample
    end: int  # one past the last speech sample


def levels_db(samples: np.ndarray, window: int) -> np.ndarray:
    """RMS level of each whole ``window`` of ``samples``, in dBFS."""
    count = len(samples) // window
    frames = samples[: count * window].astype(np.float64).reshape(count, window)
    rms = np.sqrt(np.mean(frames**2, axis=1))
    return 20.0 * np.log10(np.maximum(rms, 1e-10))


def speech_bounds(samples: np.ndarray, rate: int) -> SpeechBounds | None:
    """Where speech starts and ends in a recording, or None if it holds none.

    Pauses inside the speech do not matter: only the first and the last burst
    of :func:`speech_bursts` count.
    """
    bursts = speech_bursts(samples, rate)
    if not bursts:
        return None
    return SpeechBounds(bursts[0].start, bursts[-1].end)


def speech_bursts(samples: np.ndarray, rate: int) -> list[SpeechBounds]:
    """Each stretch of speech in a recording, in order; the gaps are pauses.

    The threshold adapts to the recording: above its noise floor (the 5th
    percentile window level) by a margin, capped below its peak, and never
    below an absolute silence floor, so both digital silence and a noisy room
    recording work.
    """
    window = rate * ANALYSIS_MS // 1000
    db = levels_db(samples, window)
    if not len(db):
        return []
    threshold = max(SILENCE_FLOOR_DB, min(np.percentile(db, 5) + NOISE_MARGIN_DB, db.max() - PEAK_RANGE_DB))
    min_windows = MIN_BURST_MS // ANALYSIS_MS
    return [SpeechBounds(a * window, b * window) for a, b in _runs(db > threshold) if b - a >= min_windows]


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) index pairs of the True runs in ``mask``."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def send_time(frame_times: Sequence[float], frame_samples: int, sample: int) -> float:
    """When the frame holding ``sample`` was sent."""
    index = min(max(sample, 0) // frame_samples, len(frame_times) - 1)
    return frame_times[index]


# What the client received, reduced to what measurement needs.


@dataclass(frozen=True)
class AudioIn:
    at: float
    seconds: float
    peak: float

    @property
    def voiced(self) -> bool:
        return self.peak >= AGENT_VOICED_PEAK


@dataclass(frozen=True)
class MessageIn:
    at: float
    type: str  # transcript, clear, mark, metrics, error
    fields: dict = field(default_factory=dict)


Received = AudioIn | MessageIn


def first_voiced_audio(received: Sequence[Received], after: float, before: float = float("inf")) -> float | None:
    """Arrival of the first non-silent agent audio in ``[after, before)``."""
    for item in received:
        if isinstance(item, AudioIn) and after <= item.at < before and item.voiced:
            return item.at
    return None


def agent_audio_between(received: Sequence[Received], after: float, before: float) -> bool:
    return first_voiced_audio(received, after, before) is not None


def barge_in_stop(received: Sequence[Received], onset: float) -> tuple[float | None, bool] | None:
    """When the agent went quiet after interrupting speech began at ``onset``.

    Returns (instant, cleared): the ``clear`` message if one came, else the
    last agent frame received of the answer that was playing at ``onset``.
    None if no answer was playing then (by :func:`playback_intervals`, with
    short stalls between chunks bridged): there was nothing to interrupt.
    """
    playing = None
    for start, end in bridged(playback_intervals(received), ANSWER_GAP_S):
        if start <= onset < end:
            playing = (start, end)
    if playing is None:
        return None
    last_audio: float | None = None
    for item in received:
        if item.at < playing[0]:
            continue
        if isinstance(item, MessageIn) and item.type == "clear" and item.at >= onset:
            if item.at <= playing[1]:
                return item.at, True
            # The agent fell silent first and cleared once it knew the words were
            # an interruption: the user heard it stop at its last frame.
            if item.at <= playing[1] + CLEAR_AFTER_SILENCE_S:
                return last_audio, True
            break
        if item.at > playing[1] and isinstance(item, AudioIn):
            break  # the next answer
        if isinstance(item, AudioIn):
            last_audio = item.at
    return last_audio, False


# A player that runs dry for less than this glitched; it did not fall silent.
GLITCH_S = 0.06


def bridged(intervals: list[tuple[float, float]], gap_s: float) -> list[tuple[float, float]]:
    """Intervals with the gaps shorter than ``gap_s`` between them filled in
    (with ``ANSWER_GAP_S``: one interval per answer)."""
    merged: list[tuple[float, float]] = []
    for start, end in intervals:
        if merged and start - merged[-1][1] < gap_s:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def playback_intervals(received: Sequence[Received]) -> list[tuple[float, float]]:
    """When a client that plays what it receives would be sounding agent audio.

    Frames play back to back from their arrival; ``clear`` drops what is queued.
    """
    intervals: list[list[float]] = []
    drains_at = float("-inf")
    for item in received:
        if isinstance(item, MessageIn) and item.type == "clear":
            if intervals and intervals[-1][1] > item.at:
                intervals[-1][1] = item.at
            drains_at = item.at
        elif isinstance(item, AudioIn):
            if item.at > drains_at:
                intervals.append([item.at, item.at])
                drains_at = item.at
            drains_at += item.seconds
            intervals[-1][1] = drains_at
    return [(a, b) for a, b in intervals]


def _is_transcript(item: Received, role: str, final: bool) -> TypeGuard[MessageIn]:
    return (
        isinstance(item, MessageIn)
        and item.type == "transcript"
        and item.fields.get("role") == role
        and bool(item.fields.get("final")) is final
    )


def is_final_transcript(item: Received, role: str) -> TypeGuard[MessageIn]:
    return _is_transcript(item, role, final=True)


def is_partial_transcript(item: Received, role: str) -> TypeGuard[MessageIn]:
    """A transcript so far: for the agent, sent as each chunk's first audio goes out."""
    return _is_transcript(item, role, final=False)


def dry_spells(received: Sequence[Received]) -> list[float]:
    """Seconds the client's player ran dry in the middle of an answer.

    A gap between two stretches of playback is inside one answer unless a
    ``clear`` or the final transcript of a new user turn came in it: then the
    agent had stopped, or was answering something else. The server sends
    silence as frames, so a dry player means the next chunk was late.
    """
    intervals = bridged(playback_intervals(received), GLITCH_S)
    boundaries = [
        item.at
        for item in received
        if (isinstance(item, MessageIn) and item.type == "clear") or is_final_transcript(item, "user")
    ]
    return [
        b_start - a_end
        for (_, a_end), (b_start, _) in zip(intervals, intervals[1:])
        if not any(a_end <= at <= b_start for at in boundaries)
    ]


# Transcript accuracy.

_WORD = re.compile(r"[a-z0-9']+")


def normalized_words(text: str) -> list[str]:
    """Lower-case words without punctuation, as WER compares them."""
    return _WORD.findall(text.lower().replace("’", "'"))


def word_error_rate(reference: str, hypothesis: str) -> float:
    """(substitutions + deletions + insertions) / reference words, on normalised words."""
    ref, hyp = normalized_words(reference), normalized_words(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h))
        previous = current
    return previous[-1] / len(ref)


# Summaries.


def distribution(values: Sequence[float | None]) -> dict:
    """n, p50, p95 and max of the values that exist (linear interpolation)."""
    present = np.array([v for v in values if v is not None], dtype=np.float64)
    if not len(present):
        return {"n": 0, "p50": None, "p95": None, "max": None}
    return {
        "n": int(len(present)),
        "p50": round(float(np.percentile(present, 50)), 1),
        "p95": round(float(np.percentile(present, 95)), 1),
        "max": round(float(present.max()), 1),
    }


# One turn, put together.


def measure_turn(
    received: Sequence[Received],
    *,
    sent_at: float,
    speech_start_at: float,
    speech_end_at: float,
    until: float,
    expect: str | None = None,
    barge_in: bool = False,
) -> dict:
    """The client's figures for one user turn, all in milliseconds.

    ``sent_at`` is when the turn's first frame went out and ``until`` when the
    next turn's did (or the run ended): messages in between belong to this turn.
    """
    window = [item for item in received if sent_at <= item.at < until]
    answer_at = first_voiced_audio(window, speech_end_at)
    user = [m for m in window if isinstance(m, MessageIn) and m.type == "transcript" and m.fields.get("role") == "user"]
    first_user = user[0].at if user else None
    finals = [m for m in user if m.fields.get("final") and (answer_at is None or m.at <= answer_at)]
    text = _final_text(window, finals)
    metrics = next(
        (m.fields for m in window if isinstance(m, MessageIn) and m.type == "metrics" and m.at >= speech_end_at),
        None,
    )
    # The agent's final transcript ends its answer, or tells what was heard of it
    # when interrupted: then it arrives during the next turn, so look past ``until``.
    answer = next(
        (
            str(m.fields.get("text", ""))
            for m in received
            if is_final_transcript(m, "agent") and answer_at is not None and m.at >= answer_at
        ),
        None,
    )
    server_v2v = metrics.get("voice_to_voice_ms") if metrics else None
    v2v = _ms(answer_at, speech_end_at)
    result = {
        "voice_to_voice_ms": v2v,
        "server_voice_to_voice_ms": server_v2v,
        "client_minus_server_ms": round(v2v - server_v2v, 1) if v2v is not None and server_v2v is not None else None,
        "first_transcript_ms": _ms(first_user, speech_start_at),
        "final_transcript_ms": _ms(finals[-1].at if finals else None, speech_end_at),
        "transcript": text,
        "expect": expect,
        "wer": round(word_error_rate(expect, text or ""), 3) if expect is not None else None,
        "answer": answer,
        "agent_spoke_during_turn": agent_audio_between(received, speech_start_at, speech_end_at),
        "answer_at": answer_at,
        "server": metrics,
        "barge_in_stop_ms": None,
        "barge_in_cleared": None,
    }
    if barge_in:
        stop = barge_in_stop(received, speech_start_at)
        if stop is not None:
            result["barge_in_stop_ms"] = _ms(stop[0], speech_start_at)
            result["barge_in_cleared"] = stop[1]
    return result


def _final_text(window: Sequence[Received], finals: Sequence[MessageIn]) -> str | None:
    """The user's words for the turn, as the agent finally understood them.

    When the user goes on before the agent answered, the server transcribes
    the whole turn again, so a later final replaces an earlier one. When the
    agent did speak in between (it cut in on a pause), the user's next words
    are a new transcript, so they are appended.
    """
    text: str | None = None
    previous_at = float("-inf")
    for final in finals:
        spoke = agent_audio_between(window, previous_at, final.at)
        piece = str(final.fields.get("text", ""))
        text = f"{text} {piece}" if text and spoke else piece
        previous_at = final.at
    return text


def _ms(at: float | None, since: float) -> float | None:
    return None if at is None else round((at - since) * 1000.0, 1)


def server_stages(metrics: dict) -> dict[str, float]:
    """Instants of the server's stages, in ms after the end of user speech.

    The metrics give durations. Working back from the first audio frame
    (``voice_to_voice_ms``): TTS got the first chunk ``tts_ttfa_ms`` before it,
    the LLM request went out ``first_chunk_ms`` before that, its first token
    came ``llm_ttft_ms`` after the request, and the final transcript was ready
    when the request went out. The endpoint is ``endpoint_ms`` after speech end.
    """
    stages = {}
    v2v = metrics.get("voice_to_voice_ms")
    if metrics.get("endpoint_ms") is not None:
        stages["endpoint"] = metrics["endpoint_ms"]
    if v2v is None:
        return stages
    stages["first_tts_audio"] = v2v
    if metrics.get("tts_ttfa_ms") is not None and metrics.get("first_chunk_ms") is not None:
        request = v2v - metrics["tts_ttfa_ms"] - metrics["first_chunk_ms"]
        stages["stt_final"] = request
        if metrics.get("llm_ttft_ms") is not None:
            stages["llm_first_token"] = request + metrics["llm_ttft_ms"]
    return stages
