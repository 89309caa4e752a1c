"""Regenerate the endpointing eval turns with the embedded Piper voice.

Run from the repository root: .venv/bin/python voice_agent/bench/turns/endpoint_turns/generate.py
Writes one FLAC per turn (16 kHz mono) and script.yaml. A number in a turn is
a pause in seconds inside it, where the user is still talking: the agent must
not answer there. Piper samples its prosody noise, so each run gives slightly
different audio: the FLAC files are committed so that every eval replays the
same turns.
"""

from __future__ import annotations

from pathlib import Path

import soundfile

from voice_agent.bench.speech import turn

RATE = 16000
HERE = Path(__file__).resolve().parent

# (name, tag, parts). The tags group the pauses by what the turn detector can
# read from the words before them:
# - pause-after-cue: a trailing preposition, article, conjunction, filler or number;
# - pause-unfinished: an unfinished thought with no such word ("I'd like two tickets");
# - pause-after-sentence: a whole sentence, then more ("Let me see. ... I think the blue one.");
# - whole: a complete short answer or question, no pause.
TURNS: list[tuple[str, str, list[str | float]]] = [
    ("go_to_boston", "pause-after-cue", ["I want to go to", 0.9, "Boston."]),
    ("phone_number", "pause-after-cue", ["My number is five five five", 1.2, "zero one nine two."]),
    ("the_um_pasta", "pause-after-cue", ["I'd like the", 0.7, "um", 0.8, "the pasta."]),
    ("table_for_six", "pause-after-cue", ["Can I get a table for", 1.0, "six?"]),
    ("arrive_friday", "pause-after-cue", ["We arrive on", 0.6, "Friday."]),
    ("burger_and_fries", "pause-after-cue", ["A cheeseburger and", 0.8, "a large fries."]),
    ("because_work", "pause-after-cue", ["I can't come tomorrow because", 1.1, "I have to work."]),
    ("code_digits", "pause-after-cue", ["The code is four two", 0.5, "seven nine."]),
    ("elm_street", "pause-after-cue", ["I live at forty two", 0.8, "Elm Street."]),
    ("with_my_sister", "pause-after-cue", ["I'm going with my", 1.3, "sister and her kids."]),
    ("so_um_suggest", "pause-after-cue", ["So", 0.5, "um", 1.0, "what do you suggest?"]),
    ("lands_at_nine", "pause-after-cue", ["My flight lands at", 1.5, "nine in the morning."]),
    ("tuesday_or", "pause-after-cue", ["Tuesday or", 0.9, "maybe Wednesday."]),
    ("two_tickets", "pause-unfinished", ["I'd like two tickets", 0.6, "for the evening show."]),
    ("the_thing_is", "pause-unfinished", ["The thing is", 0.7, "I lost my card."]),
    ("let_me_see", "pause-after-sentence", ["Let me see.", 0.9, "I think the blue one."]),
    ("yes_and_dessert", "pause-after-sentence", ["Yes.", 0.5, "And could you add a dessert?"]),
    ("no_wait", "pause-after-sentence", ["No,", 0.3, "wait, make it Thursday."]),
    ("hmm_vegetarian", "pause-after-sentence", ["Hmm.", 1.0, "Okay, the vegetarian one."]),
    ("good_how_much", "pause-after-sentence", ["That sounds good.", 0.4, "How much is it?"]),
    ("yes", "whole", ["Yes."]),
    ("no_thanks", "whole", ["No thanks."]),
    ("sure_works", "whole", ["Sure, that works."]),
    ("four", "whole", ["Four."]),
    ("thats_all", "whole", ["That's all, thank you."]),
    ("open_tomorrow", "whole", ["What time do you open tomorrow?"]),
    ("okay", "whole", ["Okay."]),
    ("book_for_seven", "whole", ["Please book it for seven."]),
    ("not_sure", "whole", ["I'm not sure."]),
    ("sounds_great", "whole", ["Sounds great."]),
]


def main() -> None:
    entries = []
    for name, tag, parts in TURNS:
        # Cut Piper's own padding at the joins, so that a pause is as long as written.
        soundfile.write(HERE / f"{name}.flac", turn(parts, RATE, trim_joins=True), RATE, subtype="PCM_16")
        expect = " ".join(part for part in parts if isinstance(part, str))
        entries.append(f"  - file: {name}.flac\n    expect: {expect!r}\n    tags: [{tag}]\n")
        print(name)
    paused = sum(1 for _, tag, _ in TURNS if tag != "whole")
    header = (
        "# The endpointing eval (voice-agent bench endpointing). Audio and this file: voice_agent/bench/turns/endpoint_turns/generate.py.\n"
        f"# {paused} turns pause mid-turn (0.3 to 1.5 s) and must not be answered during the pause;\n"
        f"# {len(TURNS) - paused} are whole short answers and questions that should be answered at once.\n"
        "turns:\n"
    )
    (HERE / "script.yaml").write_text(header + "".join(entries), encoding="utf-8")


if __name__ == "__main__":
    main()
