"""A call's first answer, before AEC3 leaves its initial state: what the VAD hears in each canceller's output.

The agent's first answer (Piper) through one of the echo rig's paths (voice_agent/replay/echo.py), or no path at
all (a headset); 0.8 s into it, as the barge-in eval's probes come, a Piper interruption. Each canceller is fed the
same two streams in 10 ms frames, in step, from the call's start (echo_compare.py's cancellers). Measured on its
output, with Silero:

- echo as speech: the share of windows over the threshold while only the echo plays, before the user;
- onset: how long after the user's first sound the VAD has heard 96 ms of speech in a row (--vad-min-speech-ms),
  or "never" within the interruption.

    .venv/bin/python experiments/echo_first_answer.py [--seeds 4]
"""

from __future__ import annotations

import argparse

import numpy as np
from echo_compare import AEC3, ANSWERS, FRAME, SHORT_FILTER, Nothing, SpeexLinear, pcm

from voice_agent.audio import PIPELINE_RATE as RATE
from voice_agent.bench.speech import silence, speech
from voice_agent.engines.vad import WINDOW, WINDOW_MS, SileroVAD
from voice_agent.replay.echo import ROOMS, draw_path

INTERRUPTIONS = ["Wait, stop. I have a question.", "Sorry, can you repeat that?", "No, that's not what I asked."]
USER_AT_S = 0.8
THRESHOLD = 0.5
MIN_SPEECH_MS = 96
CANCELLERS = {"none": Nothing, "aec3": AEC3, "speex 250 ms": lambda: SpeexLinear(SHORT_FILTER)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()
    vad = SileroVAD()
    lead = silence(0.5)
    agent = np.concatenate([lead, speech(ANSWERS[0] + " " + ANSWERS[1])])
    at = len(lead) + int(USER_AT_S * RATE)
    print("| room | canceller | echo as speech before the user | onsets, ms (one per seed) |")
    print("|---|---|---:|---|")
    for room in ("no echo", *ROOMS):
        rows: dict[str, tuple[list[float], list[str]]] = {name: ([], []) for name in CANCELLERS}
        for seed in range(args.seeds):
            user = speech(INTERRUPTIONS[seed % len(INTERRUPTIONS)])
            played, heard = call(agent, user, at, room, seed)
            for name, make in CANCELLERS.items():
                speechy = heard_as_speech(make(), played, heard, vad)
                first, user_window = len(lead) // WINDOW, at // WINDOW
                rows[name][0].append(float(np.mean(speechy[first:user_window])))
                rows[name][1].append(onset(speechy, user_window, (at + len(user)) // WINDOW))
        for name, (echo_as_speech, onsets) in rows.items():
            print(f"| {room} | {name} | {np.mean(echo_as_speech):.0%} | {', '.join(onsets)} |", flush=True)


def call(agent: np.ndarray, user: np.ndarray, at: int, room: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """What the agent plays and what the microphone hears (int16): ``user`` from sample ``at`` over the agent's
    echo through the rig's path ``seed`` in ``room``, or over no echo ("no echo": a headset)."""
    talking = np.zeros_like(agent)
    talking[at : at + len(user)] = user
    echo = np.zeros_like(agent)
    if room != "no echo":
        path = draw_path(np.random.default_rng(seed), room)
        delay = int(path.delay_ms * RATE / 1000)
        echo[delay:] = np.convolve(agent, path.room_response(RATE))[: len(agent) - delay]
    return pcm(agent), pcm(echo + talking)


def heard_as_speech(canceller, played: np.ndarray, heard: np.ndarray, vad: SileroVAD) -> np.ndarray:
    """Whether each VAD window of ``canceller``'s output, fed the call in 10 ms frames, is over THRESHOLD."""
    out = np.zeros(len(heard), np.int16)
    for start in range(0, len(heard) - FRAME + 1, FRAME):
        out[start : start + FRAME] = canceller(played[start : start + FRAME], heard[start : start + FRAME])
    return np.array(vad.stream().process(out.astype(np.float32) / 32768.0)) > THRESHOLD


def onset(speechy: np.ndarray, begin: int, end: int) -> str:
    """ms from window ``begin`` until the VAD has heard MIN_SPEECH_MS of speech in a row, before window ``end``."""
    run = 0
    for index in range(begin, min(end, len(speechy))):
        run = run + 1 if speechy[index] else 0
        if run * WINDOW_MS >= MIN_SPEECH_MS:
            return str((index + 1 - begin) * WINDOW_MS)
    return "never"


if __name__ == "__main__":
    main()
