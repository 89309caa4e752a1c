"""How long this user pauses after a finished sentence and then goes on.

Speakers differ: one answers at once, another thinks two or three seconds
between sentences. Each time the user goes on after a pause that followed a
sentence Whisper closed with a full stop (inside a turn, or by talking into
an answer that was then withdrawn), the session learns how long such a pause
of theirs can be, and a telling then waits a little longer than the longest
recent one. A user who thought longer than the silence that gives no hint
within a turn, after a finished sentence, may do so after a question too
(``TurnDetector``). Talking into the agent's answer does not say as much:
it is as often a correction ("Sorry, make that five people") as more of the
same turn. One bounded list per session.
"""

from __future__ import annotations

from collections import deque

RECENT_PAUSES = 10  # the user's last ten or so: a speaker's pace changes within a call
PAUSE_MARGIN_MS = 300  # past the longest pause seen: the answer takes about this long to be heard anyway
MIN_PAUSE_MS = 300  # shorter gaps are the rhythm of speech, not a thinking pause
MAX_TELLING_MS = 3000  # a longer silence reads as the end of the turn to anyone


class PauseHabit:
    def __init__(self, max_ms: int = MAX_TELLING_MS):
        self.max_ms = max_ms
        self._pauses: deque[tuple[float, bool]] = deque(maxlen=RECENT_PAUSES)  # (ms, into the agent's answer)

    def went_on_after(self, pause_ms: float, *, into_answer: bool = False) -> None:
        """The user went on after ``pause_ms`` of silence that followed a finished sentence: within their turn,
        or ``into_answer``, talking into the agent's answer, which was then withdrawn."""
        if pause_ms >= MIN_PAUSE_MS:
            self._pauses.append((pause_ms, into_answer))

    def longest_within_turns_ms(self) -> float:
        """The longest recent pause after a finished sentence that the user went on from within a turn; 0: none."""
        return max((pause_ms for pause_ms, into_answer in self._pauses if not into_answer), default=0.0)

    def telling_ms(self, base_ms: int) -> int:
        """The silence a finished telling waits: ``base_ms``, or longer for a user who pauses longer."""
        if not self._pauses:
            return base_ms
        longest = max(pause_ms for pause_ms, _ in self._pauses)
        return max(base_ms, min(self.max_ms, int(longest) + PAUSE_MARGIN_MS))
