"""The restaurant's SQLite database: opening hours, tables, bookings.

Plain functions on a database file, with no voice in them, so they are tested
on their own (``test_bookings.py``); ``agent.py`` makes tools of them. Each
call opens its own connection: tools run in worker threads, and SQLite
connections must not cross threads. A booking holds a table for two hours.
"""

from __future__ import annotations

import datetime
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from voice_agent import ToolError

SCHEMA = """
CREATE TABLE IF NOT EXISTS opening_hours (
    weekday INTEGER PRIMARY KEY,  -- 0 is Monday
    opens TEXT,                   -- HH:MM, NULL when closed all day
    closes TEXT
);
CREATE TABLE IF NOT EXISTS tables (
    id INTEGER PRIMARY KEY,
    seats INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS bookings (
    reference TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    party_size INTEGER NOT NULL,
    starts_at TEXT NOT NULL,      -- ISO date and time, local
    table_id INTEGER NOT NULL REFERENCES tables(id),
    cancelled INTEGER NOT NULL DEFAULT 0
);
"""

# Closed on Mondays; lunch and dinner as one opening for simplicity.
HOURS = [(0, None, None), (1, "12:00", "22:00"), (2, "12:00", "22:00"), (3, "12:00", "22:00"),
         (4, "12:00", "23:00"), (5, "12:00", "23:00"), (6, "12:00", "21:00")]  # fmt: skip
TABLES = [(1, 2), (2, 2), (3, 4), (4, 4), (5, 6), (6, 8)]
SITTING = datetime.timedelta(hours=2)
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


class BookingError(ToolError, ValueError):
    """A request the restaurant cannot take; the message is for the guest, so the model is told it (ToolError)."""


class Restaurant:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        with closing(sqlite3.connect(self.path, timeout=5.0)) as db:
            db.executescript(SCHEMA)  # commits on its own
        with self._db(write=True) as db:
            if not db.execute("SELECT 1 FROM opening_hours").fetchone():
                db.executemany("INSERT INTO opening_hours VALUES (?, ?, ?)", HOURS)
                db.executemany("INSERT INTO tables VALUES (?, ?)", TABLES)

    @contextmanager
    def _db(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        """One transaction, committed or rolled back on an exception.

        A write transaction takes SQLite's write lock at its start (BEGIN IMMEDIATE), before it
        reads: the free tables it checks cannot be booked by another call before it books one.
        """
        db = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    def opening_hours(self, day: datetime.date) -> str:
        with self._db() as db:
            opens, closes = db.execute(
                "SELECT opens, closes FROM opening_hours WHERE weekday = ?", (day.weekday(),)
            ).fetchone()
        name = WEEKDAYS[day.weekday()]
        return f"Closed on {name}s." if opens is None else f"Open on {name}s from {opens} to {closes}."

    def free_tables(self, starts_at: datetime.datetime, party_size: int) -> list[int]:
        with self._db() as db:
            return self._free_tables(db, starts_at, party_size)

    def _free_tables(self, db: sqlite3.Connection, starts_at: datetime.datetime, party_size: int) -> list[int]:
        self._check_open(db, starts_at)
        if party_size < 1:
            raise BookingError("A booking needs at least one guest.")
        taken = {
            row[0]
            for row in db.execute(
                "SELECT table_id FROM bookings WHERE NOT cancelled AND starts_at > ? AND starts_at < ?",
                ((starts_at - SITTING).isoformat(), (starts_at + SITTING).isoformat()),
            )
        }
        return [
            table
            for (table,) in db.execute("SELECT id FROM tables WHERE seats >= ? ORDER BY seats, id", (party_size,))
            if table not in taken
        ]

    def _check_open(self, db: sqlite3.Connection, starts_at: datetime.datetime) -> None:
        opens, closes = db.execute(
            "SELECT opens, closes FROM opening_hours WHERE weekday = ?", (starts_at.weekday(),)
        ).fetchone()
        if opens is None:
            raise BookingError(f"We are closed on {WEEKDAYS[starts_at.weekday()]}s.")
        last = (datetime.datetime.combine(starts_at.date(), datetime.time.fromisoformat(closes)) - SITTING).time()
        if not datetime.time.fromisoformat(opens) <= starts_at.time() <= last:
            raise BookingError(f"We take bookings from {opens} to {last:%H:%M} that day.")

    def book(self, name: str, starts_at: datetime.datetime, party_size: int) -> str:
        """Book a table; returns the booking reference."""
        if not name.strip():
            raise BookingError("A booking needs a name.")
        with self._db(write=True) as db:  # checking and booking in one write transaction: no table booked twice
            free = self._free_tables(db, starts_at, party_size)
            if not free:
                raise BookingError("No table is free for that party at that time.")
            reference = secrets.token_hex(3).upper()
            db.execute(
                "INSERT INTO bookings (reference, name, party_size, starts_at, table_id) VALUES (?, ?, ?, ?, ?)",
                (reference, name.strip(), party_size, starts_at.isoformat(), free[0]),
            )
        return reference

    def cancel(self, reference: str) -> bool:
        with self._db(write=True) as db:
            cursor = db.execute(
                "UPDATE bookings SET cancelled = 1 WHERE reference = ? AND NOT cancelled", (reference.strip().upper(),)
            )
        return cursor.rowcount == 1

    def bookings(self) -> list[dict]:
        with self._db() as db:
            db.row_factory = sqlite3.Row
            return [dict(row) for row in db.execute("SELECT * FROM bookings ORDER BY starts_at")]
