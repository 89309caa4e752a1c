"""Endpointing figures: did the agent take the turn while the user only paused,
and how soon did it answer once the user had really finished?

Pure functions over what a replay client sent and received (``measure``'s
instants, client ``time.monotonic()`` readings). ``voice-agent bench endpointing``
runs them on replayed turns; ``docs/turn-taking.md`` explains the eval.

A turn is **cut off** when, after the user's first speech and before the end
of their last, the agent either

- sent voiced audio (``spoke``): the user heard it answer into their pause; or
- sent the final user transcript (``committed``): it had decided the turn was
  over and started answering. The session drops that answer when the user
  goes on before its first audio; when it is ready sooner, the user hears it.

The cut-off's kind is its first sign, and the session sends the transcript
before any audio of the answer, so a cut-off is nearly always ``committed``;
whether the user also heard the agent's voice before finishing (``spoke``)
is counted on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .measure import AudioIn, MessageIn, Received, distribution, is_final_transcript


@dataclass(frozen=True)
class CutOff:
    kind: str  # "spoke" or "committed"
    at: float  # client instant of the first sign
    text: str | None = None  # the words the agent took as the whole turn, when it committed


def cut_off(received: Sequence[Received], speech_start_at: float, speech_end_at: float) -> CutOff | None:
    """The first sign that the agent took the turn before the user finished, if any."""
    for item in received:
        if not speech_start_at <= item.at < speech_end_at:
            continue
        if isinstance(item, AudioIn) and item.voiced:
            return CutOff("spoke", item.at)
        if isinstance(item, MessageIn) and is_final_transcript(item, "user"):
            return CutOff("committed", item.at, str(item.fields.get("text", "")))
    return None


def first_voice(received: Sequence[Received], speech_start_at: float, speech_end_at: float) -> float | None:
    """When the agent's voice first reached the user before they finished, if it did."""
    for item in received:
        if speech_start_at <= item.at < speech_end_at and isinstance(item, AudioIn) and item.voiced:
            return item.at
    return None


def measure_turn(
    received: Sequence[Received],
    *,
    speech_start_at: float,
    speech_end_at: float,
    pauses_at: Sequence[tuple[float, float]],
    figures: dict,
) -> dict:
    """One turn's endpointing figures, in milliseconds.

    ``pauses_at`` are the client instants each mid-turn pause began and ended
    (when the frames holding its first and last silent sample were sent);
    ``figures`` is the replay's own measurement of the turn (``voice_to_voice_ms``,
    ``final_transcript_ms``, ``server``). After a cut-off, the delays are those
    of the answer the agent gave once the user finished, if it did.
    """
    cut = cut_off(received, speech_start_at, speech_end_at)
    voice_at = first_voice(received, speech_start_at, speech_end_at)
    server = figures.get("server") or {}
    result = {
        "pauses_ms": [round((end - start) * 1000.0, 1) for start, end in pauses_at],
        "cut_off": None,
        "spoke_at_ms": None if voice_at is None else round((voice_at - speech_start_at) * 1000.0, 1),
        "cut_off_at_ms": None,  # after the start of the user's speech
        "cut_off_pause_ms": None,  # length of the pause it came in (the last one begun)
        "cut_off_silence_ms": None,  # how long after that pause began
        "cut_off_text": None,
        "voice_to_voice_ms": figures.get("voice_to_voice_ms"),
        "endpoint_ms": server.get("endpoint_ms"),
        "final_transcript_ms": figures.get("final_transcript_ms"),
    }
    if cut is not None:
        result["cut_off"] = cut.kind
        result["cut_off_text"] = cut.text
        result["cut_off_at_ms"] = round((cut.at - speech_start_at) * 1000.0, 1)
        # The last pause begun by then: the final transcript may only arrive
        # after the user resumed, when a slow transcription finishes.
        begun = [(start, end) for start, end in pauses_at if start <= cut.at]
        if begun:
            start, end = begun[-1]
            result["cut_off_pause_ms"] = round((end - start) * 1000.0, 1)
            result["cut_off_silence_ms"] = round((cut.at - start) * 1000.0, 1)
    return result


def summarise(turns: Sequence[dict]) -> dict:
    """False cut-off rate over the turns with a mid-turn pause, and the delays after the true ends.

    Delays are over the turns that were not cut off: after a cut-off there is
    no clean "true end" answer to time. ``tags`` (from the turn script) split
    the cut-offs by kind of pause.
    """
    paused = [turn for turn in turns if turn["pauses_ms"]]
    cut_paused = [turn for turn in paused if turn["cut_off"]]
    clean = [turn for turn in turns if not turn["cut_off"]]
    return {
        "turns": len(turns),
        "paused_turns": len(paused),
        "false_cutoffs": len(cut_paused),
        "false_cutoff_rate": round(len(cut_paused) / len(paused), 4) if paused else None,
        "spoke_in_pause": sum(1 for turn in paused if turn["spoke_at_ms"] is not None),
        # A cut-off in a turn without a pause of vad_pauses.MIN_PAUSE_MS: at a shorter break between words.
        "cutoffs_elsewhere": sum(1 for turn in turns if turn["cut_off"] and not turn["pauses_ms"]),
        "unanswered": sum(1 for turn in clean if turn["voice_to_voice_ms"] is None),
        "voice_to_voice_ms": distribution([turn["voice_to_voice_ms"] for turn in clean]),
        "endpoint_ms": distribution([turn["endpoint_ms"] for turn in clean]),
        "final_transcript_ms": distribution([turn["final_transcript_ms"] for turn in clean]),
        "by_tag": {
            tag: {
                "turns": sum(1 for turn in turns if tag in turn.get("tags", ())),
                "cut_off": sum(1 for turn in turns if tag in turn.get("tags", ()) and turn["cut_off"]),
            }
            for tag in sorted({tag for turn in turns for tag in turn.get("tags", ())})
        },
    }
