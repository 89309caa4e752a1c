"""experiments/echo_first_answer.py's measure, over AEC3 configs (configured_aec3.py) beside livekit's AEC3.

The call, the rooms, the seeds and the two columns are echo_first_answer.py's: the agent's first answer through
no path (a headset), the rig's small or reverberant room; a Piper interruption 0.8 s in. Per canceller: the share
of Silero windows over 0.5 while only the echo plays, before the user; and per seed the onset (ms after the user's
first sound until the VAD has heard 96 ms of speech in a row, or "never"). A third column gives AEC3's own
statistics at the call's end (GetStatistics: ERLE dB, delay ms; median over seeds).

    .venv/bin/python experiments/aec3_config/first_answer_configs.py [--seeds 4] [--configs NAME ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent)]

from configured_aec3 import ConfiguredAEC3  # noqa: E402
from echo_compare import AEC3, ANSWERS, FRAME, Nothing, pcm  # noqa: E402
from echo_first_answer import INTERRUPTIONS, THRESHOLD, USER_AT_S, onset  # noqa: E402

from voice_agent.audio import PIPELINE_RATE as RATE  # noqa: E402
from voice_agent.bench.speech import silence, speech  # noqa: E402
from voice_agent.engines.vad import WINDOW, SileroVAD  # noqa: E402
from voice_agent.replay.echo import ROOMS, draw_path  # noqa: E402

INITIAL = "filter.initial_state_seconds"
CONSERVATIVE = "filter.conservative_initial_phase"
NEAREND = "suppressor.dominant_nearend_detection."
HMM = "WebRTC-Aec3TransparentModeHmm/Enabled/"


def configured(settings: dict[str, float], trials: str = "") -> Callable[[], ConfiguredAEC3]:
    return lambda: ConfiguredAEC3(settings, trials)


CONFIGS: dict[str, Callable[[], Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "none": Nothing,
    "livekit aec3": AEC3,
    "default": configured({}),
    "initial 0": configured({INITIAL: 0}),
    "initial 0.5": configured({INITIAL: 0.5}),
    "initial 0, conservative": configured({INITIAL: 0, CONSERVATIVE: 1}),
    "initial 0.5, conservative": configured({INITIAL: 0.5, CONSERVATIVE: 1}),
    # The echo path's assumed gain while the linear filter is not trusted (1: the echo as loud as the playout).
    "default_gain 0.1": configured({"ep_strength.default_gain": 0.1}),
    "default_gain 0.01": configured({"ep_strength.default_gain": 0.01}),
    # Nearend mode (the transparent nearend_tuning) sooner: 12 blocks of 4 ms by default.
    "nearend trigger 2": configured({NEAREND + "trigger_threshold": 2}),
    "nearend enr 1": configured({NEAREND + "enr_threshold": 1.0}),
    "nearend tuning in lf": configured({"suppressor.nearend_tuning.mask_lf.enr_transparent": 10,
                                        "suppressor.nearend_tuning.mask_lf.enr_suppress": 10.01}),  # fmt: skip
    "no lf smoothing at init": configured({"suppressor.lf_smoothing_during_initial_phase": 0}),
    "stationarity at init": configured({"echo_audibility.use_stationarity_properties_at_init": 1}),
    "audibility x10": configured({"echo_audibility.normal_render_limit": 640, "echo_audibility.low_render_limit": 2560}),
    "bounded erl": configured({"ep_strength.bounded_erl": 1}),
    # Not a config field: the field trial for the HMM headset detector (reduces suppression with no echo path).
    "transparent mode hmm": configured({}, HMM),
    "initial 0, transparent hmm": configured({INITIAL: 0}, HMM),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--rooms", nargs="+", default=["no echo", *ROOMS], choices=["no echo", *ROOMS])
    args = parser.parse_args()
    started = time.monotonic()
    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}", flush=True)
    vad = SileroVAD()
    lead = silence(0.5)
    agent = np.concatenate([lead, speech(ANSWERS[0] + " " + ANSWERS[1])])
    at = len(lead) + int(USER_AT_S * RATE)
    users = [speech(INTERRUPTIONS[seed % len(INTERRUPTIONS)]) for seed in range(args.seeds)]
    print("| room | canceller | echo as speech before the user | onsets, ms (one per seed) | ERLE dB, delay ms at the end |")
    print("|---|---|---:|---|---|")
    for room in args.rooms:
        for name in args.configs:
            echo_as_speech, onsets, erles, delays = [], [], [], []
            for seed in range(args.seeds):
                user = users[seed]
                talking = np.zeros_like(agent)
                talking[at : at + len(user)] = user
                echo = np.zeros_like(agent)
                if room != "no echo":
                    path = draw_path(np.random.default_rng(seed), room)
                    delay = int(path.delay_ms * RATE / 1000)
                    echo[delay:] = np.convolve(agent, path.room_response(RATE))[: len(agent) - delay]
                played, heard = pcm(agent), pcm(echo + talking)
                canceller = CONFIGS[name]()
                out = np.zeros(len(heard), np.int16)
                for start in range(0, len(heard) - FRAME + 1, FRAME):
                    out[start : start + FRAME] = canceller(played[start : start + FRAME], heard[start : start + FRAME])
                speechy = np.array(vad.stream().process(out.astype(np.float32) / 32768.0)) > THRESHOLD
                first, user_window = len(lead) // WINDOW, at // WINDOW
                echo_as_speech.append(float(np.mean(speechy[first:user_window])))
                onsets.append(onset(speechy, user_window, (at + len(user)) // WINDOW))
                if isinstance(canceller, ConfiguredAEC3):
                    stats = canceller.statistics()
                    erles.append(stats["erle_db"])
                    delays.append(stats["delay_ms"])
            stats_cell = "-"
            if erles:
                known = [value for value in erles if value is not None]
                erle = f"{np.median(known):.1f}" if known else "none"
                stats_cell = f"{erle}; {', '.join(str(d) for d in delays)}"
            print(
                f"| {room} | {name} | {np.mean(echo_as_speech):.0%} | {', '.join(onsets)} | {stats_cell} |", flush=True
            )
    print(f"{time.monotonic() - started:.0f} s; load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
