"""Regenerate the benchmark turns with the embedded Piper voice.

Run from the repository root: .venv/bin/python voice_agent/bench/turns/bench_turns/generate.py
Piper samples its prosody noise, so each run gives slightly different audio:
the FLAC files are committed so that every benchmark replays the same turns.
A number in a turn is a pause in seconds, inside the turn: the endpointing
must wait through it ("I'd like a table for ... four people").
"""

from __future__ import annotations

from pathlib import Path

import soundfile

from voice_agent.bench.speech import turn

RATE = 16000
HERE = Path(__file__).resolve().parent

TURNS: dict[str, list[str | float]] = {
    "open_tonight": ["Hello, are you open tonight?"],
    "table_for_four": ["I'd like a table for", 1.0, "four people."],
    "close_sundays": ["What time do you close on Sundays?"],
    "bring_my_dog": ["Can I bring my", 0.8, "dog?"],
    "vegetarian": ["Do you have any vegetarian dishes?"],
    "arrive_at_seven": ["We will arrive at", 0.9, "around seven thirty."],
    "menu": ["Tell me about your menu. What do you recommend for dinner and dessert?"],
    "make_it_five": ["Sorry, make that five people, not four."],
    "thanks_bye": ["Thank you, goodbye."],
}


def main() -> None:
    for name, parts in TURNS.items():
        soundfile.write(HERE / f"{name}.flac", turn(parts, RATE), RATE, subtype="PCM_16")
        print(name)


if __name__ == "__main__":
    main()
