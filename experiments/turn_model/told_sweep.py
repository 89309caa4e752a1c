"""Choose LLM_TOLD, the LLM reading from which a telling complete by every other signal hands the turn over.

The pauses and their cached signals are fit.py's (run it first, with the same --cache); the LLM read
them without the agent's words. For each threshold, the rules as the server makes them
(``turn_detection.turn_detector``, default settings but a told statement answered at the complete silence,
no pause habit) decide every pause: the threshold is chosen on the synthetic and words groups (the
loosest that cuts into no more paused turns than the rules without it) and checked on the real
recordings (AMI and JFK), which the choice does not see.

    PYTHONPATH=. .venv/bin/python experiments/turn_model/told_sweep.py ../shared/audio --cache /tmp/turn_model_cache
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import fit  # experiments/turn_model/fit.py: the labelled pauses and their signals

from voice_agent.config import Settings
from voice_agent.turn_taking import turn
from voice_agent.turn_taking.turn_detection import turn_detector

THRESHOLDS = (-1.2, -1.5, -2.0, -2.5, -3.0, -4.0)
CHOOSE = ("synthetic", "words")
CHECK = ("ami", "jfk")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shared", type=Path, help="the folder with real/ (AMI excerpts, ami.rttm) and jfk.flac")
    parser.add_argument("--cache", type=Path, required=True, help="fit.py's cache of transcripts and LLM readings")
    args = parser.parse_args()
    settings = Settings()
    pauses = fit.collect(args.shared, settings.vad_threshold)
    fit.annotate(pauses, args.cache, True, None)
    parts = {
        name: [p for p in pauses if p.source in sources] for name, sources in (("choose", CHOOSE), ("check", CHECK))
    }
    report = {}
    for threshold in (None, *THRESHOLDS):
        # None: no telling is told in full, today's rules.
        turn.LLM_TOLD = float("inf") if threshold is None else threshold
        detector = turn_detector(dataclasses.replace(settings, end_silence_told_ms=settings.end_silence_complete_ms))
        report[f"LLM_TOLD {threshold}" if threshold is not None else "rules without it"] = {
            name: {
                key: value
                for key, value in fit.decide(part, lambda p, d=detector: d.required_silence_ms(p.signals())).items()
                if key != "by_source"
            }
            for name, part in parts.items()
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
