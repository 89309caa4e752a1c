"""Tools (function calling): typed Python functions the LLM may call.

``@tool`` (or a plain function in ``Agent(tools=[...])``) turns a function,
sync or async, into a :class:`Tool`: its JSON schema, in the OpenAI ``tools``
format, comes from the type hints and the docstring (the first paragraph
describes the tool, an ``Args:`` section describes the parameters).
:func:`run_tool` runs one call off the event loop, with a timeout, and turns
every outcome (a value, bad arguments, an exception, a timeout) into the text
of a ``tool`` message that the model can talk about. An exception's text
stays in the server's log (it may hold a path, a query, a host name): the
model is told only that the tool failed, unless the tool raised a
:class:`ToolError`, whose text is written for it.

The threads that run sync tools serve every session, so each session has a
share (``share``: a semaphore of ``--tool-concurrency`` calls, held until a
call's thread is free again, even past its timeout), and a call's timeout
counts from when it starts running, not from when it was asked for: a call
that waits for its turn is not charged for another's slowness. The wait
itself is bounded by the same timeout; a call that could not start in it is
not run.

A parameter annotated :class:`~voice_agent.agent.agent.CallContext` is not shown
to the model: it receives the session's context (who is calling, the
per-session data, call control).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import enum
import inspect
import json
import logging
import re
import time
import types
import typing
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..log import log_exception

log = logging.getLogger(__name__)

# Sync tools run here, never on the event loop. Bounded: a thread cannot be stopped, so a tool that outlives
# its timeout keeps its worker until it returns. Each session uses at most --tool-concurrency of them (2),
# so the default --max-sessions (8) leave half of them free for the calls that outlive their timeouts.
TOOL_THREADS = 32
_EXECUTOR = ThreadPoolExecutor(max_workers=TOOL_THREADS, thread_name_prefix="tool")
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# A result past this is cut: it goes into every later prompt of the session.
MAX_RESULT_CHARS = 4000
RESULT_CUT = " [the rest of the result was cut: too long]"


class ToolError(Exception):
    """A failure the model may be told about: its text goes into the ``tool`` message.

    Any other exception's text stays in the server's log, and the model reads only that the tool failed.
    """


@dataclass(frozen=True)
class Tool:
    """A function the model may call, with the schema it is offered under."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    function: Callable[..., Any]
    # Changes something outside the conversation (books a table): run at most
    # once per request, even when the user interrupts and asks again.
    side_effect: bool = False
    timeout_s: float | None = None  # None: the agent's --tool-timeout-s
    context_parameter: str | None = None  # the parameter that receives the CallContext

    def schema(self) -> dict[str, Any]:
        """This tool in the OpenAI ``tools`` format."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    side_effect: bool = False,
    timeout_s: float | None = None,
) -> Any:
    """Make ``function`` a :class:`Tool`; usable bare (``@tool``) or with options (``@tool(side_effect=True)``)."""

    def make(function: Callable[..., Any]) -> Tool:
        return as_tool(function, name=name, description=description, side_effect=side_effect, timeout_s=timeout_s)

    return make if function is None else make(function)


def as_tool(
    function: Tool | Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    side_effect: bool = False,
    timeout_s: float | None = None,
) -> Tool:
    """A :class:`Tool` as it is, or a plain function made into one."""
    if isinstance(function, Tool):
        return function
    if not callable(function):
        raise TypeError(f"a tool must be a function or a Tool, not {function!r}")
    tool_name = name or function.__name__
    if not _NAME.match(tool_name):
        raise ValueError(f"tool name {tool_name!r} must be 1-64 letters, digits, _ or -")
    summary, argument_help = parse_docstring(inspect.getdoc(function) or "")
    hints = typing.get_type_hints(function)
    properties: dict[str, Any] = {}
    required: list[str] = []
    context_parameter = None
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name}: *args and **kwargs cannot be described to a model")
        hint = hints.get(parameter.name, Any)
        if _is_context(hint):
            context_parameter = parameter.name
            continue
        schema = json_schema(hint)
        if parameter.name in argument_help:
            schema["description"] = argument_help[parameter.name]
        if parameter.default is parameter.empty:
            required.append(parameter.name)
        elif _json_safe(parameter.default):
            schema["default"] = parameter.default
        properties[parameter.name] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    return Tool(
        name=tool_name,
        description=description or summary or tool_name.replace("_", " "),
        parameters=parameters,
        function=function,
        side_effect=side_effect,
        timeout_s=timeout_s,
        context_parameter=context_parameter,
    )


class ToolContext:
    """What a tool parameter annotated with a subclass of this gets instead of a model's argument: the call's
    context (:class:`~voice_agent.agent.agent.CallContext`, whose module builds on this one)."""


def _is_context(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, ToolContext)


def _json_safe(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def json_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of one type hint: scalars, Literal, Enum, lists, dicts, optional types."""
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is typing.Literal:
        values = list(arguments)
        kinds = {_SCALARS.get(type(value)) for value in values}
        schema: dict[str, Any] = {"enum": values}
        if len(kinds) == 1 and None not in kinds:
            schema["type"] = kinds.pop()
        return schema
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return json_schema(typing.Literal[tuple(member.value for member in hint)])
    if origin in (typing.Union, types.UnionType):
        options = [a for a in arguments if a is not type(None)]
        if len(options) == 1:
            return json_schema(options[0])  # Optional[X]: absent or null means the default
        return {"anyOf": [json_schema(option) for option in options]}
    if hint in (list, tuple, set) or origin in (list, tuple, set, frozenset):
        schema = {"type": "array"}
        if arguments:
            schema["items"] = json_schema(arguments[0])
        return schema
    if hint is dict or origin is dict:
        return {"type": "object"}
    raise TypeError(f"a tool parameter of type {hint!r} cannot be described in JSON schema")


_ARGS_HEADER = re.compile(r"^(Args|Arguments|Parameters):\s*$", re.I)
_ARG_LINE = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_ARG = re.compile(r"^:param\s+(?:[\w\[\], |]+\s+)?(\w+):\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The summary (first paragraph) and the parameter descriptions of a Google- or Sphinx-style docstring."""
    lines = doc.splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _ARGS_HEADER.match(line.strip()) or line.strip().startswith(":"):
            break
        summary.append(line.strip())
    described: dict[str, str] = {}
    in_args = False
    current: str | None = None
    arg_indent: int | None = None  # the indent of the first "name: text" line of the Args section
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if sphinx := _SPHINX_ARG.match(stripped):
            current = sphinx.group(1)
            described[current] = sphinx.group(2).strip()
        elif _ARGS_HEADER.match(stripped):
            in_args, current, arg_indent = True, None, None
        elif not in_args or not stripped:
            current = None
        elif indent == 0:
            in_args = False  # the next section (Returns:, Raises:)
        elif (match := _ARG_LINE.match(line)) and (arg_indent is None or indent <= arg_indent):
            current, arg_indent = match.group(1), indent
            described[current] = match.group(2).strip()
        elif current is not None:
            described[current] = f"{described[current]} {stripped}"
    return " ".join(summary), described


@dataclass
class ToolOutcome:
    """What one call came to: ``content`` is the ``tool`` message's text."""

    content: str
    ok: bool
    duration_ms: float


class ToolArgumentsError(ValueError):
    pass


def parse_arguments(tool: Tool, arguments: str) -> dict[str, Any]:
    """The model's JSON arguments, checked against the tool's parameters."""
    try:
        values = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        raise ToolArgumentsError(f"the arguments are not valid JSON ({exc.msg})") from None
    if not isinstance(values, dict):
        raise ToolArgumentsError("the arguments must be a JSON object")
    properties = tool.parameters["properties"]
    unknown = sorted(set(values) - set(properties))
    if unknown:
        raise ToolArgumentsError(f"unknown argument(s): {', '.join(unknown)}")
    missing = [name for name in tool.parameters["required"] if name not in values]
    if missing:
        raise ToolArgumentsError(f"missing argument(s): {', '.join(missing)}")
    for name, value in values.items():
        problem = _mismatch(properties[name], value)
        if problem:
            raise ToolArgumentsError(f"argument {name}: {problem}")
    return values


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def _mismatch(schema: dict[str, Any], value: Any) -> str | None:
    if value is None:
        return None  # null means "not given": the function's default or None
    if "enum" in schema and value not in schema["enum"]:
        return f"{value!r} is not one of {schema['enum']}"
    expected = schema.get("type")
    if expected in _JSON_TYPES:
        if isinstance(value, bool) and expected != "boolean":
            return f"expected {expected}, got a boolean"
        if expected == "integer" and isinstance(value, float) and value.is_integer():
            return None
        if not isinstance(value, _JSON_TYPES[expected]):
            return f"expected {expected}, got {type(value).__name__}"
    return None


async def run_tool(
    tool: Tool, arguments: str, context: Any, timeout_s: float, share: asyncio.Semaphore | None = None
) -> ToolOutcome:
    """Run one call, within the session's ``share`` of calls at once, and describe its outcome; never raises
    (except on cancellation)."""
    started = time.perf_counter()

    def outcome(content: str, ok: bool) -> ToolOutcome:
        return ToolOutcome(content, ok, (time.perf_counter() - started) * 1000.0)

    try:
        values = parse_arguments(tool, arguments)
    except ToolArgumentsError as exc:
        return outcome(json.dumps({"error": f"{tool.name} was not called: {exc}"}), False)
    values = {name: value for name, value in values.items() if value is not None}
    if tool.context_parameter is not None:
        values[tool.context_parameter] = context
    limit = tool.timeout_s if tool.timeout_s is not None else timeout_s
    try:
        result = await _call(tool, values, limit, share)
    except _NotStarted:
        log.warning(
            "tool %s could not start within %.1f s: its session's share or every tool thread was busy", tool.name, limit
        )
        return outcome(json.dumps({"error": f"{tool.name} was not called: too many tool calls at once"}), False)
    except TimeoutError:
        log.warning("tool %s timed out after %.1f s", tool.name, limit)
        done = "it may still take effect" if tool.side_effect else "there is no result"
        return outcome(json.dumps({"error": f"{tool.name} did not finish within {limit:g} s; {done}"}), False)
    except ToolError as exc:
        return outcome(json.dumps({"error": f"{tool.name} failed: {exc}"}), False)
    except Exception:
        log_exception(log, "tool %s failed", tool.name)
        return outcome(json.dumps({"error": f"{tool.name} failed"}), False)
    return outcome(result_text(result), True)


class _NotStarted(Exception):
    """The call waited its whole timeout for a slot and a thread, and was not run."""


async def _call(tool: Tool, values: dict[str, Any], limit: float, share: asyncio.Semaphore | None) -> Any:
    """The tool's return value: at most ``limit`` waiting for a slot and a thread, then ``limit`` from its start."""
    if share is not None:
        try:
            await asyncio.wait_for(share.acquire(), limit)
        except TimeoutError:
            raise _NotStarted from None
    if inspect.iscoroutinefunction(tool.function):
        try:
            return await asyncio.wait_for(tool.function(**values), limit)
        finally:
            if share is not None:
                share.release()
    loop = asyncio.get_running_loop()
    started = loop.create_future()

    def run() -> Any:
        _call_soon(loop, _set_result, started)
        return tool.function(**values)

    future = _EXECUTOR.submit(contextvars.copy_context().run, run)  # the session's id goes on its log lines
    if share is not None:
        # Released when the thread is free, not at the timeout: a call past its timeout still holds its thread.
        future.add_done_callback(lambda _: _call_soon(loop, share.release))
    call = asyncio.wrap_future(future)
    try:
        await asyncio.wait_for(asyncio.shield(started), limit)
    except TimeoutError:
        if future.cancel():  # still queued: it never runs
            raise _NotStarted from None
        # It started just now: its own timeout applies.
    result = await asyncio.wait_for(call, limit)
    if inspect.isawaitable(result):
        result = await asyncio.wait_for(result, limit)
    return result


def _set_result(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    """``callback`` on ``loop``, from any thread; nothing once the loop is closed (the server is stopping)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


def result_text(result: Any) -> str:
    """A tool's return value as the text of a ``tool`` message, cut at :data:`MAX_RESULT_CHARS`."""
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        result = dataclasses.asdict(result)
    text = result if isinstance(result, str) else json.dumps(result, default=str, ensure_ascii=False)
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + RESULT_CUT
