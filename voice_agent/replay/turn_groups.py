"""The endpointing eval's groups of turns, and the figures it reports for each.

Three groups, each a committed turn script under ``voice_agent/bench/turns/endpoint_turns/``:

- ``synthetic``: each part of a paused turn synthesized on its own, so the
  words before a pause end in Piper's sentence-final fall (``generate.py``);
- ``words``: the same paused turns, each utterance synthesized whole and the
  pause cut in at a word boundary (``generate_words.py``, ``word_cuts.py``);
- ``real``: single-speaker turns of real meeting speech (AMI, CC BY 4.0) and
  JFK (``real_turns.py``);
- ``phone``: the real group's AMI turns as a phone call carries them: down to
  8 kHz, through the G.711 μ-law codec of Twilio Media Streams and back
  (:func:`over_the_phone`), whatever the transport of the run.

They play in one session, one group after the other; each turn carries a
``group:NAME`` tag so that the figures can be split again. Per group the eval
reports the cut-ins beside the wait at the ends of the turns that were not cut
into (``wait_ms``: mean, p50, p90), how often the agent's voice reached the user during a mid-turn pause,
and how much of it they heard (``overlap_ms``): the real cost of a false
cut-off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..audio import float_to_int16, mulaw_decode, mulaw_encode, resample
from .endpointing import summarise
from .measure import AudioIn, MessageIn, Received, distribution
from .script import Script, Turn, load_script

GROUP_FOLDERS = {"synthetic": ".", "words": "words", "real": "real", "phone": "real"}
GROUPS = tuple(GROUP_FOLDERS)
TAG = "group:"
PHONE_RATE = 8000  # Twilio Media Streams: 8 kHz G.711 μ-law
PHONE_TAG = "ami"  # the phone group: the real group's turns with this tag


def group_script(turns_root: Path, name: str) -> Path:
    return turns_root / GROUP_FOLDERS[name] / "script.yaml"


def load_groups(turns_root: Path, names: Sequence[str], rate: int, gap_ms: int, limit: int | None = None) -> Script:
    """The groups' turns in one script, each tagged ``group:NAME``; ``limit``: the first N of each group.

    The scripts list their paused turns first, so a small ``limit`` still has pauses to judge.
    """
    turns = []
    for name in names:
        script = load_script(str(group_script(turns_root, name)), rate, gap_ms)
        chosen = list(script.turns)
        if name == "phone":
            chosen = [over_the_phone(turn) for turn in chosen if PHONE_TAG in turn.tags]
        chosen = chosen if limit is None else chosen[:limit]
        turns += [dataclasses.replace(turn, tags=(*turn.tags, TAG + name)) for turn in chosen]
    return Script(tuple(turns), rate, ", ".join(str(group_script(turns_root, name)) for name in names))


def over_the_phone(turn: Turn) -> Turn:
    """``turn`` as a phone line hands it to the agent: 8 kHz μ-law, back at its own rate and length.

    The speech bounds stay those of the clean audio: the true end of the turn
    does not move with the codec.
    """
    narrow = float_to_int16(resample(turn.audio, turn.rate, PHONE_RATE))
    heard = mulaw_decode(mulaw_encode(narrow)).astype(np.float32) / 32768.0
    audio = resample(heard, PHONE_RATE, turn.rate)[: len(turn.audio)]
    audio = np.pad(audio, (0, len(turn.audio) - len(audio)))
    return dataclasses.replace(turn, name=f"{turn.name}_phone", audio=audio)


def group_of(tags: Sequence[str]) -> str:
    return next((tag[len(TAG) :] for tag in tags if tag.startswith(TAG)), "")


def voiced_playback(received: Sequence[Received]) -> list[tuple[float, float]]:
    """When a client that plays the agent's frames as they arrive sounds its voice (not its silent frames).

    The same player as ``measure.playback_intervals``: frames back to back
    from their arrival, the queue dropped at ``clear``.
    """
    voiced: list[list[float]] = []
    drains_at = float("-inf")
    for item in received:
        if isinstance(item, MessageIn) and item.type == "clear":
            for interval in voiced:
                interval[1] = min(interval[1], item.at)
            drains_at = item.at
        elif isinstance(item, AudioIn):
            start = max(drains_at, item.at)
            drains_at = start + item.seconds
            if not item.voiced:
                continue
            if voiced and voiced[-1][1] >= start:
                voiced[-1][1] = drains_at
            else:
                voiced.append([start, drains_at])
    return [(a, b) for a, b in voiced if b > a]


def overlap_ms(received: Sequence[Received], pauses_at: Sequence[tuple[float, float]]) -> float:
    """Milliseconds of agent voice the user heard during their mid-turn pauses, before going on."""
    heard = 0.0
    for start, end in voiced_playback(received):
        for pause_start, pause_end in pauses_at:
            heard += max(0.0, min(end, pause_end) - max(start, pause_start))
    return round(heard * 1000.0, 1)


def waits(values: Sequence[float | None]) -> dict:
    """The wait after the true end of the turns that were not cut into: n, mean, p50 and p90."""
    present = np.array([v for v in values if v is not None], dtype=np.float64)
    if not len(present):
        return {"n": 0, "mean": None, "p50": None, "p90": None}
    return {
        "n": int(len(present)),
        "mean": round(float(present.mean()), 1),
        "p50": round(float(np.percentile(present, 50)), 1),
        "p90": round(float(np.percentile(present, 90)), 1),
    }


def summarise_groups(turns: Sequence[dict]) -> dict:
    """Per group: ``endpointing.summarise``'s figures, and how often and how much the user heard the agent in a pause.

    ``heard_in_pause`` counts the paused turns in which the agent's voice
    played during a mid-turn pause (``overlap_ms`` > 0); its rate is over the
    group's paused turns, the eval's bar for false cut-offs (docs/results/endpointing.md).
    """
    groups = {}
    for name in dict.fromkeys(group_of(turn.get("tags", ())) for turn in turns):
        group = [turn for turn in turns if group_of(turn.get("tags", ())) == name]
        summary = summarise(group)
        paused = [turn for turn in group if turn["pauses_ms"]]
        heard = [turn for turn in paused if turn["overlap_ms"]]
        summary["heard_in_pause"] = len(heard)
        summary["heard_in_pause_rate"] = round(len(heard) / len(paused), 4) if paused else None
        summary["overlap_ms"] = distribution([turn["overlap_ms"] for turn in heard])
        summary["overlap_ms_total"] = round(sum(turn["overlap_ms"] for turn in heard), 1)
        summary["wait_ms"] = waits([turn["endpoint_ms"] for turn in group if not turn["cut_off"]])
        groups[name or "ungrouped"] = summary
    return groups
