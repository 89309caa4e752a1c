"""What one client may use, and how many clients a process takes.

Pure bookkeeping: every class takes a clock, so tests drive time by hand, and
none touches a socket. ``connection.py`` applies the per-client limits to each
message; ``app.py`` admits sessions through :class:`SessionRegistry`, which
also drains them on shutdown, and budgets handshakes and bytes per client
address through :class:`AddressBudgets`, which outlive any one connection.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Callable

from ..config import Settings
from ..rate_limit import Clock, RateLimit
from .capacity import CapacityModel
from .close_codes import CloseCode

AUDIO_BURST_S = 3.0  # a network stall can deliver a few seconds of audio at once
MESSAGE_BURST_S = 2.0
BYTES_BURST_S = 2.0
TEXT_TURNS_PER_S = 1.0  # each text turn is an LLM request
TEXT_TURNS_BURST = 2.0
HANDSHAKES_BURST_S = 4.0  # a browser tab reloaded a few times, a client reconnecting after a network change
TRACKED_ADDRESSES = 10_000  # the least recently seen are forgotten, their budgets full again


class Deadlines:
    """The idle timeouts and the maximum session length. 0 disables any of them.

    Idle time is time in which nobody speaks: the user's speech (the turns
    voice activity detection hears in the client's audio) and text reset it
    through :meth:`touch`, the agent's answers through :meth:`busy`; audio
    frames alone, silence or a byte a minute, do not. Until the user's first turn the limit is
    ``first_turn_s``, shorter: a client that connects and never says anything
    holds its slot that long (plus any greeting) at most.
    """

    IDLE = "idle_timeout"
    TOO_LONG = "session_time_limit"

    def __init__(self, idle_s: float, max_s: float, first_turn_s: float = 0.0, clock: Clock = time.monotonic):
        self._clock = clock
        self._idle_s = idle_s if idle_s > 0 else math.inf
        first = first_turn_s if first_turn_s > 0 else math.inf
        self._first_idle_s = min(first, self._idle_s)
        self._spoke = False
        self._last = clock()
        self._end = self._last + max_s if max_s > 0 else math.inf

    def touch(self) -> None:
        """The user spoke or typed."""
        self._spoke = True
        self._last = self._clock()

    def busy(self) -> None:
        """The session is doing something (the agent speaks, the user is mid-turn): not idle now."""
        self._last = self._clock()

    def _limit(self) -> float:
        return self._idle_s if self._spoke else self._first_idle_s

    def expired(self) -> str | None:
        """Which deadline has passed, if any: :attr:`IDLE` or :attr:`TOO_LONG`."""
        now = self._clock()
        if now >= self._end:
            return self.TOO_LONG
        if now - self._last >= self._limit():
            return self.IDLE
        return None

    def remaining(self) -> float | None:
        """Seconds until the next deadline; None when there is none."""
        due = min(self._end, self._last + self._limit())
        return None if due == math.inf else max(0.0, due - self._clock())


def byte_budget(settings: Settings, clock: Clock = time.monotonic) -> RateLimit:
    """``--max-bytes-per-s`` with its burst: one per client address (:class:`AddressBudgets`), or per stream."""
    return RateLimit(settings.max_bytes_per_s, settings.max_bytes_per_s * BYTES_BURST_S, clock)


class ClientLimits:
    """The limits on one client: audio, message, byte and text-turn rates, idle timeout and session length.

    ``data``: the byte budget, shared by every connection of the client's address; a fresh one if None.
    """

    def __init__(self, settings: Settings, clock: Clock = time.monotonic, data: RateLimit | None = None):
        self.audio = RateLimit(settings.max_audio_rate, settings.max_audio_rate * AUDIO_BURST_S, clock)
        self.messages = RateLimit(settings.max_messages_per_s, settings.max_messages_per_s * MESSAGE_BURST_S, clock)
        self.data = data or byte_budget(settings, clock)
        self.texts = RateLimit(TEXT_TURNS_PER_S, TEXT_TURNS_BURST, clock)
        self.deadlines = Deadlines(
            settings.idle_timeout_s, settings.max_session_s, settings.first_turn_timeout_s, clock
        )
        self.report_drop = False  # the last frame refused was the first of a run: tell the client once per run
        self._dropping = False

    def admit_audio(self, seconds: float) -> bool:
        admitted = self.audio.take(seconds)
        self.report_drop = not admitted and not self._dropping
        self._dropping = not admitted
        return admitted


class AddressBudgets:
    """What each client address may spend, whatever connection it spends it on: handshakes and bytes.

    A client that reconnects finds its budgets as it left them, so a fresh
    connection is no fresh burst. Kept for the :data:`TRACKED_ADDRESSES` most
    recently seen addresses; one forgotten starts again with full budgets,
    which an address unseen that long has refilled anyway.
    """

    def __init__(self, settings: Settings, clock: Clock = time.monotonic, tracked: int = TRACKED_ADDRESSES):
        self._settings = settings
        self._clock = clock
        self._tracked = tracked
        self._handshake_rate = settings.max_connections_per_s
        self._addresses: OrderedDict[str, tuple[RateLimit, RateLimit]] = OrderedDict()

    def _budgets(self, address: str) -> tuple[RateLimit, RateLimit]:
        budgets = self._addresses.pop(address, None)
        if budgets is None:
            rate = self._handshake_rate
            budgets = RateLimit(rate, rate * HANDSHAKES_BURST_S, self._clock), byte_budget(self._settings, self._clock)
        self._addresses[address] = budgets
        if len(self._addresses) > self._tracked:
            self._addresses.popitem(last=False)
        return budgets

    def admit_handshake(self, address: str) -> bool:
        """Whether ``address`` may start another handshake now (and spend one from its budget)."""
        return self._budgets(address)[0].take(1)

    def bytes_of(self, address: str) -> RateLimit:
        """The byte budget every connection from ``address`` spends."""
        return self._budgets(address)[1]


class Refused(Exception):
    """A session that may not start now. ``kind`` labels the metric; the message is the close reason."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind


class Slot:
    """One admitted session, as the registry sees it."""

    def __init__(self, registry: SessionRegistry | None = None, address: str | None = None, token: str | None = None):
        self._registry = registry
        self.address = address
        self.token = token
        self.answering: Callable[[], bool] = lambda: False  # set by the connection once its session exists
        self.close_requested = asyncio.Event()
        self.close_code = CloseCode.GOING_AWAY
        self.close_reason = ""

    def request_close(self, code: CloseCode, reason: str) -> None:
        if not self.close_requested.is_set():
            self.close_code, self.close_reason = code, reason
            self.close_requested.set()

    def release(self) -> None:
        if self._registry is not None:
            self._registry._release(self)
            self._registry = None

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()


class SessionRegistry:
    """The live sessions of a process: admission and draining on shutdown.

    At most ``maximum`` sessions in all and ``per_address`` from one client
    address (0 is no limit for either), so one client cannot take every slot.
    A session opened without an address counts only towards ``maximum``.
    Telephony streams also count towards ``per_token`` for the token they
    carry (a digest of it, never the token itself). With a ``capacity`` model,
    a session is also refused when the model judges that one more would not
    fit (voice_agent/server/capacity.py).
    """

    def __init__(self, maximum: int, per_address: int = 0, clock: Clock = time.monotonic, per_token: int = 0):
        self.maximum = maximum
        self.per_address = per_address
        self.per_token = per_token
        self.draining = False
        self.capacity: CapacityModel | None = None
        self._clock = clock
        self._slots: set[Slot] = set()
        self._by_address: dict[str | None, int] = {}
        self._by_token: dict[str, int] = {}

    @property
    def active(self) -> int:
        return len(self._slots)

    def open(self, address: str | None = None, token: str | None = None) -> Slot:
        """Admit a session from ``address`` (carrying telephony ``token``), or raise :class:`Refused`."""
        if self.draining:
            raise Refused("shutting_down", "server is shutting down")
        if self.maximum > 0 and len(self._slots) >= self.maximum:
            raise Refused("full", "server is full")
        if address is not None and self.per_address > 0 and self._by_address.get(address, 0) >= self.per_address:
            raise Refused("address_full", "too many sessions from this address")
        if token is not None and self.per_token > 0 and self._by_token.get(token, 0) >= self.per_token:
            raise Refused("token_full", "too many telephony streams for this token")
        if self.capacity is not None and (verdict := self.capacity.verdict(len(self._slots))).reason is not None:
            raise Refused(verdict.reason, verdict.close_reason)
        slot = Slot(self, address, token)
        self._slots.add(slot)
        self._by_address[address] = self._by_address.get(address, 0) + 1
        if token is not None:
            self._by_token[token] = self._by_token.get(token, 0) + 1
        return slot

    def _release(self, slot: Slot) -> None:
        if slot not in self._slots:
            return
        self._slots.discard(slot)
        left = self._by_address[slot.address] - 1
        if left:
            self._by_address[slot.address] = left
        else:
            del self._by_address[slot.address]
        if slot.token is not None:
            if left_for_token := self._by_token[slot.token] - 1:
                self._by_token[slot.token] = left_for_token
            else:
                del self._by_token[slot.token]

    async def drain(self, grace_s: float, poll_s: float = 0.05, linger_s: float = 5.0) -> None:
        """Refuse new sessions; close each live one with 1001 once it is not answering, or when ``grace_s`` is up.

        Returns when every session has gone, or ``linger_s`` after the grace
        period if some connection will not finish closing.
        """
        self.draining = True
        deadline = self._clock() + grace_s
        while self._slots and self._clock() < deadline + linger_s:
            overdue = self._clock() >= deadline
            for slot in list(self._slots):
                if overdue or not slot.answering():
                    slot.request_close(CloseCode.GOING_AWAY, "server is shutting down")
            await asyncio.sleep(poll_s)
