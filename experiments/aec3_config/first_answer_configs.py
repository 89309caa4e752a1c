"""experiments/echo_first_answer.py's measure, over AEC3 configs (configured_aec3.py) beside livekit's AEC3.

The call, the rooms, the seeds and the two columns are echo_first_answer.py's: the agent's first answer through
no path (a headset), the rig's small or reverberant room; a Piper interruption 0.8 s in. Per canceller: the share
of Silero windows over 0.5 while only the echo plays, before the user; and per seed the onset (ms after the user's
first sound until the VAD has heard 96 ms of speech in a row, or "never"); and the calls where the echo alone
gives such a run before the user (a false start of speech). A last column gives AEC3's own
statistics at the call's end (GetStatistics: ERLE dB, delay ms; median over seeds).

    .venv/bin/python experiments/aec3_config/first_answer_configs.py [--seeds 4] [--configs NAME ...]
        [--sweep FIELD VALUE ...] [--base FIELD=VALUE ...] [--trials FIELD_TRIALS]

--sweep adds one AEC3 per value of one config field, each over --base's settings and --trials' field trials.
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
from echo_compare import AEC3, ANSWERS, Nothing  # noqa: E402
from echo_first_answer import INTERRUPTIONS, USER_AT_S, call, heard_as_speech, onset  # noqa: E402

from voice_agent.audio import PIPELINE_RATE as RATE  # noqa: E402
from voice_agent.bench.speech import rendition, silence, speech  # noqa: E402
from voice_agent.engines.vad import WINDOW, SileroVAD  # noqa: E402
from voice_agent.replay.echo import ROOMS  # noqa: E402

INITIAL = "filter.initial_state_seconds"
CONSERVATIVE = "filter.conservative_initial_phase"
NEAREND = "suppressor.dominant_nearend_detection."
NEAREND_LF = "suppressor.nearend_tuning.mask_lf."
AUDIBILITY = "echo_audibility."
HMM = "WebRTC-Aec3TransparentModeHmm/Enabled/"


def configured(settings: dict[str, float], trials: str = "") -> Callable[[], ConfiguredAEC3]:
    return lambda: ConfiguredAEC3(settings, trials)


GAIN = "ep_strength.default_gain"
FLOOR = "suppressor.floor_first_increase"
CONFIGS: dict[str, Callable[[], Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "none": Nothing,
    "livekit aec3": AEC3,
    "default": configured({}),
    "initial 0": configured({INITIAL: 0}),
    "initial 0.5": configured({INITIAL: 0.5}),
    "initial 0, conservative": configured({INITIAL: 0, CONSERVATIVE: 1}),
    "initial 0.5, conservative": configured({INITIAL: 0.5, CONSERVATIVE: 1}),
    # The echo path's assumed gain while the linear filter is not trusted (1: the echo as loud as the playout).
    "default_gain 0.3": configured({GAIN: 0.3}),
    "default_gain 0.2": configured({GAIN: 0.2}),
    "default_gain 0.1": configured({GAIN: 0.1}),
    "default_gain 0.01": configured({GAIN: 0.01}),
    # The nonlinear echo model's reverb decay.
    "default_len 0.5": configured({"ep_strength.default_len": 0.5}),
    # How far a band's gain may jump up in one 4 ms block: from this floor, then doubling (max_inc_factor).
    "floor_first_increase 0.01": configured({FLOOR: 0.01}),
    "max_inc_factor 10": configured({"suppressor.normal_tuning.max_inc_factor": 10}),
    # Nearend mode (the nearend_tuning) sooner or more often: 12 blocks of 4 ms, the echo 6 dB under, by default.
    "nearend trigger 2": configured({NEAREND + "trigger_threshold": 2}),
    "nearend enr 4": configured({NEAREND + "enr_threshold": 4}),
    "nearend tuning transparent in lf": configured(
        {NEAREND_LF + "enr_transparent": 10, NEAREND_LF + "enr_suppress": 10.01}
    ),
    "no lf smoothing at init": configured({"suppressor.lf_smoothing_during_initial_phase": 0}),
    "stationarity at init": configured({"echo_audibility.use_stationarity_properties_at_init": 1}),
    "audibility x10": configured({AUDIBILITY + "normal_render_limit": 640, AUDIBILITY + "low_render_limit": 2560}),
    "bounded erl": configured({"ep_strength.bounded_erl": 1}),
    # Not a config field: the field trial for the HMM headset detector (reduces suppression with no echo path).
    "transparent mode hmm": configured({}, HMM),
    "initial 0, transparent mode hmm": configured({INITIAL: 0}, HMM),
    # Combinations of the single settings that moved the onsets.
    "default_gain 0.3, floor 0.01": configured({GAIN: 0.3, FLOOR: 0.01}),
    "default_gain 0.3, floor 0.01, nearend enr 4": configured({GAIN: 0.3, FLOOR: 0.01, NEAREND + "enr_threshold": 4}),
    "default_gain 0.2, floor 0.1": configured({GAIN: 0.2, FLOOR: 0.1}),
    "default_gain 0.1, floor 0.1": configured({GAIN: 0.1, FLOOR: 0.1}),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--rooms", nargs="+", default=["no echo", *ROOMS], choices=["no echo", *ROOMS])
    parser.add_argument("--renditions", type=int, default=1, help="Piper renditions of the call, each over the seeds")
    parser.add_argument("--sweep", nargs="+", metavar="FIELD VALUE", help="a config field, then its values")
    parser.add_argument("--base", nargs="*", default=[], metavar="FIELD=VALUE", help="under every --sweep value")
    parser.add_argument("--trials", default="", help="WebRTC field trials for every --sweep value")
    args = parser.parse_args()
    names = list(args.configs)
    if args.sweep:
        base = {field: float(value) for field, value in (setting.split("=") for setting in args.base)}
        field, *values = args.sweep
        for value in values:
            name = " ".join([*args.base, f"{field}={value}", args.trials]).strip()
            CONFIGS[name] = configured({**base, field: float(value)}, args.trials)
            names.append(name)
    started = time.monotonic()
    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}", flush=True)
    vad = SileroVAD()
    lead = silence(0.5)
    # Piper samples its prosody noise at each rendition: every config hears the same renditions, and
    # --renditions R repeats the seeds over R renditions of the answer and the interruptions.
    calls = []
    for index in range(args.renditions):
        say = speech if index == 0 else rendition
        agent = np.concatenate([lead, say(ANSWERS[0] + " " + ANSWERS[1])])
        calls += [(agent, say(INTERRUPTIONS[seed % len(INTERRUPTIONS)]), seed) for seed in range(args.seeds)]
    print(
        "| room | canceller | echo as speech before the user | calls where the echo alone starts speech "
        "| onsets, ms (one per seed) | median onset, 90th percentile, nevers | ERLE dB at the end (median), delays ms |"
    )
    print("|---|---|---:|---:|---|---|---|")
    for room in args.rooms:
        for name in names:
            echo_as_speech, false_starts, onsets, erles, delays = [], 0, [], [], []
            for agent, user, seed in calls:
                at = len(lead) + int(USER_AT_S * RATE)
                played, heard = call(agent, user, at, room, seed)
                canceller = CONFIGS[name]()
                speechy = heard_as_speech(canceller, played, heard, vad)
                first, user_window = len(lead) // WINDOW, at // WINDOW
                echo_as_speech.append(float(np.mean(speechy[first:user_window])))
                false_starts += onset(speechy, first, user_window) != "never"
                onsets.append(onset(speechy, user_window, (at + len(user)) // WINDOW))
                if isinstance(canceller, ConfiguredAEC3):
                    stats = canceller.statistics()
                    erles.append(stats["erle_db"])
                    delays.append(stats["delay_ms"])
            heard_at = [int(value) for value in onsets if value != "never"]
            spread = f"{np.median(heard_at):.0f}, {np.percentile(heard_at, 90):.0f}" if heard_at else "-, -"
            summary = f"{spread}, {len(onsets) - len(heard_at)}"
            stats_cell = "-"
            if erles:
                known = [value for value in erles if value is not None]
                stats_cell = f"{np.median(known):.1f}" if known else "none"
                stats_cell += "; " + ", ".join(str(d) for d in delays[: args.seeds])
            cells = [room, name, f"{np.mean(echo_as_speech):.0%}", f"{false_starts} of {len(calls)}", ", ".join(onsets)]
            print(f"| {' | '.join([*cells, summary, stats_cell])} |", flush=True)
    print(f"{time.monotonic() - started:.0f} s; load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
