"""One flat :class:`Settings` from the groups, and the command line and environment generated from it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .access import AccessSettings
from .agent import AgentSettings, ReportSettings
from .limits import CapacitySettings, LimitsSettings
from .llm import LlmSettings
from .server import OperationsSettings, ServerSettings
from .speech_output import SpeechOutputSettings
from .stt import SttSettings
from .telephony import TelephonySettings
from .turn_taking import BargeInSettings, TurnSettings

ENV_PREFIX = "VOICE_AGENT_"


# A dataclass takes its bases' fields from the last base to the first: the groups are listed here in
# reverse, so that the fields, and --help, run from the server's to the reports'.
@dataclass(frozen=True)
class Settings(
    ReportSettings,
    AgentSettings,
    OperationsSettings,
    AccessSettings,
    CapacitySettings,
    LimitsSettings,
    TelephonySettings,
    SpeechOutputSettings,
    LlmSettings,
    BargeInSettings,
    TurnSettings,
    SttSettings,
    ServerSettings,
):
    """Every setting of one server process, flat: ``settings.stt_model``, ``settings.max_sessions``."""

    @classmethod
    def from_sources(cls, args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None) -> Settings:
        """Merge CLI arguments (those not None), environment and defaults."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            cli_value = getattr(args, f.name, None) if args is not None else None
            if cli_value is not None:
                values[f.name] = cli_value
                continue
            env_value = environ.get(ENV_PREFIX + f.name.upper())
            if env_value is not None:
                values[f.name] = _parse(f, env_value)
        return cls(**values)


def parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 1/0, true/false, yes/no or on/off")


def parse_list(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


# The annotations as types: under ``from __future__ import annotations`` a Field's own ``type`` is a string.
_FIELD_TYPES: dict[str, Any] = typing.get_type_hints(Settings)


def _parser(f: dataclasses.Field) -> Callable[[str], Any]:
    """How one raw string becomes a value of ``f``'s type."""
    kind = _FIELD_TYPES[f.name]
    if kind is bool:
        return parse_bool
    if kind == tuple[str, ...]:
        return parse_list
    return kind  # int, float, str


def _parse(f: dataclasses.Field, raw: str) -> Any:
    try:
        value = _parser(f)(raw)
    except ValueError as exc:
        raise SystemExit(f"{ENV_PREFIX}{f.name.upper()}={raw!r}: {exc}") from None
    choices = f.metadata.get("choices")
    if choices and value not in choices:
        raise SystemExit(f"{ENV_PREFIX}{f.name.upper()}={raw!r}: choose one of {', '.join(map(str, choices))}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per setting. Defaults are None so unset flags fall through to env."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in dataclasses.fields(Settings):
        group_name = f.metadata["group"]
        if group_name not in groups:
            groups[group_name] = parser.add_argument_group(group_name)
        env_name = ENV_PREFIX + f.name.upper()
        default = ",".join(f.default) if isinstance(f.default, tuple) else f.default
        shown = (default[:60] + "...") if isinstance(default, str) and len(default) > 60 else default
        help = f"{f.metadata['help']} [env {env_name}; default {shown!r}]"
        flag = "--" + f.name.replace("_", "-")
        if _FIELD_TYPES[f.name] is bool:
            groups[group_name].add_argument(
                flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help
            )
            continue
        groups[group_name].add_argument(
            flag, dest=f.name, type=_parser(f), default=None, choices=f.metadata.get("choices"), help=help
        )
