"""How a setting is declared: its default, its help, its --help group and its allowed values."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def option(default: Any, help: str, group: str, choices: tuple | None = None) -> Any:
    """A settings field: the CLI flag and the environment variable are generated from it."""
    return field(default=default, metadata={"help": help, "group": group, "choices": choices})
