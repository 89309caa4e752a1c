"""Echo return loss enhancement of the session's echo canceller on the echo rig's rooms.

For each seed, one of the rig's echo paths (voice_agent/replay/echo.py: -25 to -10 dB, 50 to 250 ms late, a
60 ms room) carries 10 s of the agent's Piper voice into the microphone, alone, and a user's question over the
last 2 s. ERLE is the input's energy over the canceller's output during the agent alone: in the first 2 s
(converging) and after 2 s; the user's level after the canceller is against the user alone. Both streams go
in 20 ms client frames in step, as a session's do, with the agent's audio sent its output lead (120 ms) ahead.

Then six answers in a row, each through a new path (as the rig draws one for each answer) or all through one,
with one canceller for the call or a new one at each answer: the median ERLE over answers 2 to 6, by time
into the answer.

    .venv/bin/python experiments/echo_erle.py [--seeds 8]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from voice_agent.audio import PIPELINE_RATE as RATE
from voice_agent.bench.speech import silence, speech
from voice_agent.turn_taking.echo_canceller import EchoCanceller
from voice_agent.replay.echo import draw_path

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
    cpu = 0.0
    for seed in range(args.seeds):
        path = draw_path(np.random.default_rng(seed))
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
        cleaned = np.concatenate(out)
        cleaned = np.concatenate([cleaned, np.zeros(len(heard) - len(cleaned), np.float32)])

        def erle(part: slice) -> float:
            mask = np.zeros(len(heard), bool)
            mask[part] = True
            mask &= np.repeat(voiced[::FRAME], FRAME)[: len(heard)]
            return db(echo[mask]) - db(cleaned[mask])

        user_part = slice(user_at, user_at + len(user_speech))
        rows.append(
            (seed, path.gain_db, path.delay_ms, erle(slice(0, 2 * RATE)), erle(slice(2 * RATE, user_at)),
             db(cleaned[user_part]) - db(user[user_part]))
        )  # fmt: skip
    print("| seed | echo gain dB | delay ms | ERLE 0-2 s dB | ERLE 2-10 s dB | user after canceller dB |")
    print("|---|---|---|---|---|---|")
    for seed, gain, delay, first, later, kept in rows:
        print(f"| {seed} | {gain:.1f} | {delay:.0f} | {first:.1f} | {later:.1f} | {kept:+.1f} |")
    first = [r[3] for r in rows]
    later = [r[4] for r in rows]
    print(f"median ERLE 0-2 s {np.median(first):.1f} dB, after 2 s {np.median(later):.1f} dB")
    seconds = args.seeds * len(agent) / RATE
    for same_path in (True, False):
        for new_canceller in (False, True):
            print(
                "one path" if same_path else "a new path each answer",
                "a new canceller each answer" if new_canceller else "one canceller",
                answers(same_path, new_canceller),
            )
    print(f"CPU {cpu / seconds * 100:.2f} % of one core per session ({cpu / (seconds * 100) * 1000:.3f} ms per 10 ms)")


def answers(same_path: bool, new_canceller: bool) -> dict[str, float]:
    answer = np.concatenate([speech(AGENT.split(" Tickets")[0] + " Tickets are fifteen dollars."), silence(0.8)])
    rng = np.random.default_rng(0)
    path = draw_path(rng)
    played, echoes = [], []
    for _ in range(6):
        path = path if same_path else draw_path(rng)
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
