"""How many sessions this process carries within its latency budget, learnt from the sessions it serves.

Every stage of a session spends this machine's CPU: VAD, Whisper, Piper, the
LLM when it runs in process (not with ``--llm openai``), and the event loop.
Their sum per second of conversation is one session's real-time factor in
core-seconds per second. It is measured, not configured: once a second the
server hands :meth:`CapacityModel.sample` its own CPU-time counter (every
thread of the process, the native pools of CTranslate2, onnxruntime and
llama.cpp included) and the number of live sessions. Over a sliding window
the CPU spent while no session was live is the idle cost, and the rest,
divided by the session-seconds served, is the cost of a session.

A session cannot spend CPU it does not get: on a machine short of CPU (more
sessions than it carries, or other processes) each one spends less and its
turns wait, so the window's figure falls just when the server is overloaded
(docs/results/capacity.md: six sessions starved of CPU measured 0.11 core-s/s
each). So while the median voice-to-voice is over the budget the cost may rise
but not fall.

The rule: a new session is admitted while the predicted utilisation with it,
``(idle + (live + 1) x session cost) / cores``, stays within ``target``, and
while the median voice-to-voice of the turns in the window stays within the
latency budget (the prediction cannot see CPU that other processes take).
A server with no live session always takes one: there is no one to slow
down. Until a few seconds of sessions have been measured nothing is known, and only
the fixed ``--max-sessions`` bounds admission; a measured cost is kept when
the server goes idle, so the next caller is judged by it.

Pure bookkeeping with an injected clock: ``app.py`` feeds it and asks it.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..config import Settings

Clock = Callable[[], float]

OVERLOADED = "overloaded"
OVER_BUDGET = "over_budget"
RETRY_AFTER_S = 5
MIN_SESSION_S = 20.0  # session-seconds in the window before its cost is trusted: a few turns of one call
MIN_TURNS = 3  # turns in the window before their median is judged
MIN_COST = 0.001  # core-seconds per second: a floor, so that a session that cost nothing measurable divides


@dataclass(frozen=True)
class Verdict:
    """Whether one more session fits now, and the figures that decided it (``/readyz`` shows them)."""

    reason: str | None  # None: it fits; else OVERLOADED or OVER_BUDGET
    detail: str
    sessions: int
    cores: float
    capacity: int | None  # sessions within target at the measured cost; None before it is known
    session_cost: float | None  # core-seconds per second of one session
    idle_cost: float  # core-seconds per second with no session
    predicted_utilisation: float | None  # with one more session
    voice_to_voice_p50_s: float | None

    @property
    def close_reason(self) -> str:
        return f"{self.reason}; retry after {RETRY_AFTER_S} s"

    def as_json(self) -> dict[str, object]:
        def rounded(value: float | None, digits: int = 3) -> float | None:
            return None if value is None else round(value, digits)

        return {
            "ready": self.reason is None,
            "reason": self.reason or "ready",
            "detail": self.detail,
            "sessions": self.sessions,
            "cores": self.cores,
            "capacity": self.capacity,
            "session_cost": rounded(self.session_cost),
            "idle_cost": rounded(self.idle_cost),
            "predicted_utilisation": rounded(self.predicted_utilisation),
            "voice_to_voice_p50_ms": None
            if self.voice_to_voice_p50_s is None
            else round(self.voice_to_voice_p50_s * 1000),
            **({} if self.reason is None else {"retry_after_s": RETRY_AFTER_S}),
        }


@dataclass
class _Interval:
    end: float
    seconds: float
    cpu_s: float
    sessions: int


class CapacityModel:
    """``cores``: the CPU this process may use; ``target``: the share of it sessions may fill (0 disables the
    rule on CPU); ``budget_s``: the median voice-to-voice allowed (0 disables the rule on latency)."""

    def __init__(
        self,
        *,
        cores: float,
        target: float,
        budget_s: float,
        window_s: float = 60.0,
        min_session_s: float = MIN_SESSION_S,
        clock: Clock = time.monotonic,
    ):
        self.cores = cores
        self.target = target
        self.budget_s = budget_s
        self.window_s = window_s
        self.min_session_s = min_session_s
        self._clock = clock
        self._intervals: deque[_Interval] = deque()
        self._turns: deque[tuple[float, float]] = deque()  # (at, voice-to-voice seconds)
        self._last: tuple[float, float, int] | None = None  # (at, CPU counter, sessions) of the last sample
        self._session_cost: float | None = None
        self._idle_cost = 0.0

    def sample(self, cpu_s: float, sessions: int) -> None:
        """The process's CPU-time counter and its live sessions now; call it about once a second."""
        now = self._clock()
        if self._last is not None:
            at, cpu_before, sessions_before = self._last
            # An interval in which a session came or went is left out: no count of sessions is right for it.
            if now > at and cpu_s >= cpu_before and sessions == sessions_before:
                self._intervals.append(_Interval(now, now - at, cpu_s - cpu_before, sessions))
        self._last = (now, cpu_s, sessions)
        self._forget(now)
        self._estimate()

    def observe_turn(self, voice_to_voice_s: float) -> None:
        self._turns.append((self._clock(), voice_to_voice_s))
        self._forget(self._clock())

    @property
    def session_cost(self) -> float | None:
        return self._session_cost

    def capacity(self) -> int | None:
        """Sessions that fit within ``target`` at the measured cost; None before any cost is known."""
        if self._session_cost is None or self.target <= 0:
            return None
        room = self.target * self.cores - self._idle_cost
        return max(0, math.floor(room / self._session_cost + 1e-9))

    def verdict(self, sessions: int) -> Verdict:
        """Whether a session more than ``sessions`` fits."""
        self._forget(self._clock())
        cost = self._session_cost
        predicted = None if cost is None else (self._idle_cost + (sessions + 1) * cost) / self.cores
        p50 = self._p50()
        reason, detail = None, "within capacity"
        if sessions == 0:
            # No one else to slow down; and a server that refused its only caller would never serve.
            detail = "no session is live: one always fits"
        elif self.target > 0 and predicted is not None and predicted > self.target:
            reason = OVERLOADED
            detail = (
                f"one more session would use {predicted:.0%} of {self.cores:g} cores "
                f"(target {self.target:.0%}; a session costs {cost:.2f} core-s/s)"
            )
        elif self.budget_s > 0 and p50 is not None and p50 > self.budget_s:
            reason = OVER_BUDGET
            detail = (
                f"median voice-to-voice {p50 * 1000:.0f} ms over the last {len(self._turns)} turns "
                f"exceeds the {self.budget_s * 1000:.0f} ms budget"
            )
        elif cost is None:
            detail = "no session measured yet: only --max-sessions bounds admission"
        return Verdict(reason, detail, sessions, self.cores, self.capacity(), cost, self._idle_cost, predicted, p50)

    def _forget(self, now: float) -> None:
        while self._intervals and self._intervals[0].end <= now - self.window_s:
            self._intervals.popleft()
        while self._turns and self._turns[0][0] <= now - self.window_s:
            self._turns.popleft()

    def _estimate(self) -> None:
        idle = [i for i in self._intervals if i.sessions == 0]
        idle_s = sum(i.seconds for i in idle)
        if idle_s > 0:
            self._idle_cost = sum(i.cpu_s for i in idle) / idle_s
        busy = [i for i in self._intervals if i.sessions > 0]
        session_s = sum(i.seconds * i.sessions for i in busy)
        if session_s >= self.min_session_s:
            spent = sum(i.cpu_s - self._idle_cost * i.seconds for i in busy)
            cost = max(spent / session_s, MIN_COST)
            if self._session_cost is None or cost > self._session_cost or not self._late():
                self._session_cost = cost

    def _late(self) -> bool:
        """Whether the window's turns were over budget: its sessions may have been short of CPU."""
        p50 = self._p50()
        return self.budget_s > 0 and p50 is not None and p50 > self.budget_s

    def _p50(self) -> float | None:
        return statistics.median(v for _, v in self._turns) if len(self._turns) >= MIN_TURNS else None


def capacity_model(settings: Settings) -> CapacityModel:
    cores = settings.cpu_cores or len(os.sched_getaffinity(0))
    return CapacityModel(cores=cores, target=settings.capacity_target, budget_s=settings.latency_budget_ms / 1000.0)
