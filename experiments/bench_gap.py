"""Explain the gap between client and server voice-to-voice in replay reports.

The server times the end of speech by the end of the last 32 ms Silero window
over the threshold; the replay client by an energy pass. This replays the
exact stream each run sent (silence, with each turn at its frame) through the
same Silero model, finds where the server's end of speech fell, and splits
each turn's ``client_minus_server_ms`` into that definition difference and the
rest (transport and event-loop delays).

    .venv/bin/python experiments/bench_gap.py artifacts/bench/<run>/sessions-*/report.json
"""

from __future__ import annotations

import json
import sys

import numpy as np

from voice_agent.replay.script import load_script
from voice_agent.replay.transport import FRAME_S
from voice_agent.engines.vad import WINDOW, SileroVAD

THRESHOLD = 0.5  # the server's default --vad-threshold


def main(paths: list[str]) -> None:
    vad = SileroVAD()
    rows = []
    for path in paths:
        report = json.load(open(path))
        rate = report["sample_rate"]
        if rate != 16000:
            raise SystemExit(f"{path}: only 16 kHz sessions are replayed exactly (no resampler in between)")
        frame = int(rate * FRAME_S)
        turns = {turn.name: turn for turn in load_script(report["script"]["source"], rate).turns}
        for run in report["runs"]:
            sent = run["turns"]
            stream = np.zeros(
                max(t["sent_frame"] * frame + len(turns[t["name"]].audio) for t in sent) + rate, np.float32
            )
            for t in sent:
                audio = turns[t["name"]].audio
                stream[t["sent_frame"] * frame : t["sent_frame"] * frame + len(audio)] = audio
            speech_windows = np.flatnonzero(np.array(vad.stream().process(stream)) >= THRESHOLD)
            for t in sent:
                if t["client_minus_server_ms"] is None:
                    continue
                turn, first = turns[t["name"]], t["sent_frame"] * frame
                ends = (speech_windows + 1) * WINDOW
                inside = ends[(ends > first) & (ends <= first + len(turn.audio) + rate // 2)]
                if not len(inside):
                    continue
                # Both sides time the 20 ms frame that holds their last speech sample.
                definition = ((inside[-1] - first - 1) // frame - (turn.speech.end - 1) // frame) * FRAME_S * 1000
                gap = t["client_minus_server_ms"]
                rows.append((path, run["session"], t["name"], gap, definition, round(gap - definition, 1)))
    for row in rows:
        print(*row, sep="\t")
    gap, definition, rest = (np.array([row[i] for row in rows]) for i in (3, 4, 5))
    print(
        f"turns {len(rows)}: client - server median {np.median(gap):.1f} ms; of which end-of-speech definition "
        f"median {np.median(definition):.1f} ms; rest median {np.median(rest):.1f}, p95 {np.percentile(rest, 95):.1f}, "
        f"max {rest.max():.1f} ms"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
