"""Echo return loss enhancement of the session's echo canceller on the echo rig's rooms.

For each seed and room, one of the rig's echo paths (voice_agent/replay/echo.py: -25 to -10 dB, 50 to 250 ms
late; a small 60 ms room, or a reverberant one whose 400 ms tail is louder than the direct sound) carries 10 s
of the agent's Piper voice into the microphone, alone, and a user's question over the last 2 s. ERLE is the input's energy over the canceller's output during the agent alone: in the first 2 s
(converging) and after 2 s; the user's level after the canceller is against the user alone. Both streams go
in 20 ms client frames in step, as a session's do, with the agent's audio sent its output lead (120 ms) ahead.

Then six answers in a row, each through a new path (as the rig draws one for each answer) or all through one,
with one canceller for the call or a new one at each answer: the median ERLE over answers 2 to 6, by time
into the answer.

CPU, in the same loop (so that the ratio holds on a shared machine): the canceller's, and the hand-made echo
test's per-window work on the same audio (EchoReference: the output at each frame, ``explains`` on each
32 ms VAD window, ``silent_under`` every 480 ms), as ms of CPU per second of audio.

    .venv/bin/python experiments/echo_erle.py [--seeds 8]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from voice_agent.audio import PIPELINE_RATE as RATE
from voice_agent.bench.speech import silence, speech
from voice_agent.echo_reference import INPUT_SAMPLES, QUIET_INPUT_SAMPLES, EchoReference
from voice_agent.engines.vad import WINDOW
from voice_agent.replay.echo import ROOMS, draw_path
from voice_agent.turn_taking.echo_canceller import EchoCanceller

FRAME = RATE // 50
LEAD = int(0.12 * RATE)
AGENT = (
    "Sure. The museum opens at nine in the morning and closes at six in the evening. "
    "Tickets are fifteen dollars for adults, and children under twelve get in free. "
    "The guided tour starts every hour from the main hall."
)
USER = "Wait, how much is it for students?"


def db(audio: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(audio.astype(np.float64) ** 2) + 1e-20))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=8)
    args = parser.parse_args()
    agent = np.concatenate([speech(AGENT), silence(1.0)])[: 12 * RATE]
    agent = np.concatenate([agent, silence(12 - len(agent) / RATE)])
    user_speech = speech(USER)
    user = np.zeros_like(agent)
    user_at = 10 * RATE
    user[user_at : user_at + len(user_speech)] = user_speech[: len(user) - user_at]
    voiced = np.abs(agent) > 0.01  # frames of the agent's voice, not its pauses
    rows = []
    cpu = hand_cpu = 0.0
    for seed, room_kind in [(seed, kind) for kind in ROOMS for seed in range(args.seeds)]:
        path = draw_path(np.random.default_rng(seed), room_kind)
        room = path.room_response(RATE)
        delay = int(path.delay_ms * RATE / 1000)
        echo = np.concatenate([np.zeros(delay), np.convolve(agent, room)])[: len(agent)].astype(np.float32)
        heard = echo + user
        canceller = EchoCanceller()
        out = []
        started = time.process_time()
        canceller.played(agent[:LEAD], RATE)  # the pacer's lead, sent at once
        for start in range(0, len(heard), FRAME):
            canceller.played(agent[LEAD + start : LEAD + start + FRAME], RATE)
            out.append(canceller.process(heard[start : start + FRAME]))
        cpu += time.process_time() - started
        hand_cpu += hand_made_cpu(agent, heard)
        cleaned = np.concatenate(out)
        cleaned = np.concatenate([cleaned, np.zeros(len(heard) - len(cleaned), np.float32)])

        user_part = slice(user_at, user_at + len(user_speech))
        rows.append(
            (f"{seed} {room_kind}", path.gain_db, path.delay_ms, erle(echo, cleaned, voiced, slice(0, 2 * RATE)), erle(echo, cleaned, voiced, slice(2 * RATE, user_at)),
             db(cleaned[user_part]) - db(user[user_part]))
        )  # fmt: skip
    print("| seed, room | echo gain dB | delay ms | ERLE 0-2 s dB | ERLE 2-10 s dB | user after canceller dB |")
    print("|---|---|---|---|---|---|")
    for seed, gain, delay, first, later, kept in rows:
        print(f"| {seed} | {gain:.1f} | {delay:.0f} | {first:.1f} | {later:.1f} | {kept:+.1f} |")
    for room_kind in ROOMS:
        first = [r[3] for r in rows if r[0].endswith(room_kind)]
        later = [r[4] for r in rows if r[0].endswith(room_kind)]
        print(f"{room_kind}: median ERLE 0-2 s {np.median(first):.1f} dB, after 2 s {np.median(later):.1f} dB")
    seconds = len(rows) * len(agent) / RATE
    for room_kind in ROOMS:
        for same_path in (True, False):
            for new_canceller in (False, True):
                print(
                    room_kind,
                    "one path" if same_path else "a new path each answer",
                    "a new canceller each answer" if new_canceller else "one canceller",
                    answers(same_path, new_canceller, room_kind),
                )
    print(
        f"CPU per second of audio: canceller {cpu / seconds * 1000:.2f} ms, hand-made echo test "
        f"{hand_cpu / seconds * 1000:.2f} ms (ratio {cpu / hand_cpu:.2f})"
    )


def erle(echo: np.ndarray, cleaned: np.ndarray, voiced: np.ndarray, part: slice) -> float:
    """The echo's energy over the canceller's output in ``part``, in the agent's ``voiced`` frames."""
    mask = np.zeros(len(echo), bool)
    mask[part] = True
    mask &= np.repeat(voiced[::FRAME], FRAME)[: len(echo)]
    return db(echo[mask]) - db(cleaned[mask])


def hand_made_cpu(agent: np.ndarray, heard: np.ndarray) -> float:
    """CPU seconds of the hand-made echo test's per-window work over ``heard``, ``agent`` playing."""
    started = time.process_time()
    reference = EchoReference(0.0)
    reference.played(agent[:LEAD], RATE, 0.0)
    for start in range(0, len(heard), FRAME):
        at = (start + FRAME) / RATE
        reference.played(agent[LEAD + start : LEAD + start + FRAME], RATE, start / RATE)
        end = start + FRAME
        if end // WINDOW != start // WINDOW and end >= INPUT_SAMPLES:
            reference.explains(heard[end - INPUT_SAMPLES : end], at)
        if end % (QUIET_INPUT_SAMPLES // 2) < FRAME and end >= QUIET_INPUT_SAMPLES:
            reference.silent_under(heard[end - QUIET_INPUT_SAMPLES : end], at)
    return time.process_time() - started


def answers(same_path: bool, new_canceller: bool, room: str) -> dict[str, float]:
    answer = np.concatenate([speech(AGENT.split(" Tickets")[0] + " Tickets are fifteen dollars."), silence(0.8)])
    rng = np.random.default_rng(0)
    path = draw_path(rng, room)
    played, echoes = [], []
    for _ in range(6):
        path = path if same_path else draw_path(rng, room)
        delay = int(path.delay_ms * RATE / 1000)
        echo = np.concatenate([np.zeros(delay), np.convolve(answer, path.room_response(RATE))])[: len(answer)]
        played.append(answer)
        echoes.append(echo.astype(np.float32))
    agent, heard = np.concatenate(played), np.concatenate(echoes)
    canceller = EchoCanceller()
    canceller.played(agent[:LEAD], RATE)
    out = []
    for start in range(0, len(heard), FRAME):
        if new_canceller and start and start // len(answer) != (start - FRAME) // len(answer):
            canceller = EchoCanceller()
            canceller.played(agent[start : start + LEAD], RATE)
        canceller.played(agent[LEAD + start : LEAD + start + FRAME], RATE)
        out.append(canceller.process(heard[start : start + FRAME]))
    cleaned = np.concatenate(out)
    cleaned = np.concatenate([cleaned, np.zeros(len(heard) - len(cleaned), np.float32)])
    spans = {}
    for begin, end in ((0, 0.25), (0.25, 0.5), (0.5, 1), (1, 2), (2, 4)):
        erles = []
        for index in range(1, 6):
            part = slice(index * len(answer) + int(begin * RATE), index * len(answer) + int(end * RATE))
            erles.append(db(heard[part]) - db(cleaned[part]))
        spans[f"{begin}-{end} s"] = round(float(np.median(erles)), 1)
    return spans


if __name__ == "__main__":
    main()
