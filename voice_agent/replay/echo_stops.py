"""Did the agent stop for its own voice? Figures for the barge-in eval's echo rig.

Pure functions over what a replay client received (``measure``'s instants).
With the echo rig on (``echo.py``), the only sound in the microphone outside
the user's own turns is the agent's echo; whatever the agent does about
speech there, it does about itself:

- ``clears``: it gave up its answer (``clear``);
- ``pauses``: its voice fell silent for ``MIN_PAUSE_S`` or more in the middle
  of an answer and came back (the session pauses while it checks overlapping
  words). A chunk that comes late looks the same, so compare with a run
  without echo;
- ``turns``: it took its echo for a user turn (a final user transcript).

The user's windows run from the start of each turn's speech to ``SETTLE_S``
after its end (``bargein.SETTLE_S``: time to react to it).
"""

from __future__ import annotations

from collections.abc import Sequence

from .bargein import SETTLE_S
from .measure import GLITCH_S, MessageIn, Received, bridged, is_final_transcript, playback_intervals

MIN_PAUSE_S = 0.1


def user_windows(speech: Sequence[tuple[float, float]], settle_s: float = SETTLE_S) -> list[tuple[float, float]]:
    """(start, end) of each turn's speech, widened to ``settle_s`` after its end."""
    return [(start, end + settle_s) for start, end in speech]


def echo_stops(received: Sequence[Received], windows: Sequence[tuple[float, float]]) -> dict:
    """What the agent did, outside the user's windows, that only its own echo could have caused.

    Each list holds the client instants (as given) of the events.
    """

    def outside(at: float) -> bool:
        return not any(start <= at < end for start, end in windows)

    intervals = bridged(playback_intervals(received), GLITCH_S)
    boundaries = [item.at for item in received if isinstance(item, MessageIn) and item.type == "clear"]
    boundaries += [item.at for item in received if is_final_transcript(item, "user")]
    pauses = [
        a_end
        for (_, a_end), (b_start, _) in zip(intervals, intervals[1:])
        if b_start - a_end >= MIN_PAUSE_S and outside(a_end) and not any(a_end <= at <= b_start for at in boundaries)
    ]
    return {
        "clears": [m.at for m in received if isinstance(m, MessageIn) and m.type == "clear" and outside(m.at)],
        "pauses": pauses,
        "turns": [m.at for m in received if is_final_transcript(m, "user") and outside(m.at)],
    }
