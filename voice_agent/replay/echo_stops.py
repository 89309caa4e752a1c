"""Did the agent stop for its own voice? Figures for the barge-in eval's echo rig.

Pure functions over what a replay client received (``measure``'s instants).
With the echo rig on (``echo.py``), the only sound in the microphone outside
the user's own turns is the agent's echo; whatever the agent does about
speech there, it does about itself. Each stop is timed when the user would
hear it: when the agent's voice fell silent.

- ``clears``: it fell silent and gave up its answer (``clear``, which may
  come up to ``CLEAR_AFTER_SILENCE_S`` later, once the words were checked);
- ``pauses``: its voice fell silent for ``MIN_PAUSE_S`` or more, and came
  back within ``CLEAR_AFTER_SILENCE_S``, with neither a user turn nor the
  end of the answer (its final transcript) in between (the
  session pauses while it checks overlapping words). A chunk that comes late
  is no pause: the server announces each chunk (the agent's partial
  transcript) with its first audio, so a silence that such an announcement
  ends was the next chunk's synthesis, not the agent holding back audio it had;
- ``stopped``: its voice fell silent for good without a ``clear``, and the
  answer had not ended: the agent's final transcript, which the server sends
  as an answer's last audio goes out, did not come within ``END_SLACK_S``;
- ``turns``: it took its echo for a user turn: a final user transcript
  outside the user's windows that came after the agent's voice had begun
  playing since the user last spoke (the user's own final, however slow,
  comes before the answer to it).

The user's windows run from the start of each turn's speech to a little
after its end: ``bargein.SETTLE_S`` for a turn spoken over the agent (time to
react to it), ``REACTION_S`` for one spoken after the agent finished. A turn
the agent began to answer before its speech ended (``cut_ins``: it took a
pause in it for the end) is spoken over the agent from then on: what the
agent does about the rest of it, it does about the user.
"""

from __future__ import annotations

from collections.abc import Sequence

from .bargein import SETTLE_S
from .measure import (
    CLEAR_AFTER_SILENCE_S,
    GLITCH_S,
    MessageIn,
    Received,
    bridged,
    is_final_transcript,
    is_partial_transcript,
    playback_intervals,
)

MIN_PAUSE_S = 0.1
# An answer that ends on its own: its final transcript arrives this close to
# the moment the client's player runs dry (the server sends it after the last
# frame, which plays out within the output lead).
END_SLACK_S = 0.5
# After a turn spoken while the agent was quiet: the session may still be
# checking its last words when its answer starts.
REACTION_S = 0.5


def user_windows(turns: Sequence[tuple[float, float, bool]]) -> list[tuple[float, float]]:
    """(start, end) of each turn's speech (start, end, spoken over the agent), widened after its end."""
    return [(start, end + (SETTLE_S if over_agent else REACTION_S)) for start, end, over_agent in turns]


def cut_ins(intervals: Sequence[tuple[float, float]], turns: Sequence[tuple[float, float, bool]]) -> list[float]:
    """When the agent's voice (``intervals`` of it) began while a user's turn not spoken over it went on."""
    return [
        begin
        for begin, _ in intervals
        if any(start < begin < end for start, end, over_agent in turns if not over_agent)
    ]


def echo_stops(received: Sequence[Received], turns: Sequence[tuple[float, float, bool]]) -> dict:
    """What the agent did, outside the user's windows, that only its own echo could have caused; and when it
    began to talk in a user's turn (``cut_ins``).

    ``turns`` are the user's: (speech start, speech end, spoken over the
    agent). Each list holds the client instants: when the agent's voice fell
    silent or began, or when the user transcript came.
    """
    intervals = bridged(playback_intervals(received), GLITCH_S)
    cut = cut_ins(intervals, turns)
    windows = user_windows(
        [(start, end, over_agent or any(start < at < end for at in cut)) for start, end, over_agent in turns]
    )

    def outside(at: float) -> bool:
        return not any(start <= at < end for start, end in windows)

    def after_agent_voice(at: float) -> bool:
        spoke = max((end for start, end, _ in turns if start <= at), default=float("-inf"))
        return any(spoke < start < at for start, _ in intervals)

    clears = [m.at for m in received if isinstance(m, MessageIn) and m.type == "clear"]
    finals = [m.at for m in received if is_final_transcript(m, "user")]
    answered = [m.at for m in received if is_final_transcript(m, "agent")]
    chunk_starts = [m.at for m in received if is_partial_transcript(m, "agent")]
    echo_turns = [at for at in finals if outside(at) and after_agent_voice(at)]
    stops: dict[str, list[float]] = {"clears": [], "pauses": [], "stopped": [], "turns": echo_turns, "cut_ins": cut}
    for index, (_, silent_at) in enumerate(intervals):
        resumes_at = intervals[index + 1][0] if index + 1 < len(intervals) else None
        until = (
            silent_at + CLEAR_AFTER_SILENCE_S
            if resumes_at is None
            else min(resumes_at, silent_at + CLEAR_AFTER_SILENCE_S)
        )
        if any(silent_at <= at <= until for at in clears):
            kind = "clears"
        elif resumes_at is not None and resumes_at - silent_at < MIN_PAUSE_S:
            continue  # too short to hear as a pause: a chunk a little late
        elif resumes_at is not None and any(silent_at <= at <= resumes_at for at in chunk_starts):
            continue  # the next chunk came late
        elif (
            resumes_at is not None
            and MIN_PAUSE_S <= resumes_at - silent_at < CLEAR_AFTER_SILENCE_S
            and not any(silent_at <= at <= resumes_at for at in finals)
            and not any(silent_at - END_SLACK_S <= at <= resumes_at for at in answered)
        ):
            kind = "pauses"
        elif not any(abs(at - silent_at) <= END_SLACK_S for at in answered):
            kind = "stopped"
        else:
            continue  # the answer ended
        if outside(silent_at):
            stops[kind].append(silent_at)
    return stops
