"""The public agent API: what to say, which tools, and hooks into each session.

An :class:`Agent` is built once and serves every session; each session gets
its own :class:`CallContext`, which the session-start hook may adjust (the
instructions, greeting and tools of that one call) and which tools receive
when they ask for it with a parameter annotated ``CallContext``.
``voice-agent serve --agent MODULE_OR_FILE:NAME`` serves one
(:func:`load_agent`), and ``voice_agent.create_app(agent=...)`` embeds it.
See ``docs/agents.md``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import importlib.util
import inspect
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import DEFAULT_SYSTEM_PROMPT, Settings
from ..log import log_exception
from .dial_targets import checked_transfer_target
from .tools import Tool, ToolContext, as_tool

log = logging.getLogger(__name__)

# Plain hooks run here, off the event loop; one that outlives its timeout keeps its thread until it returns.
HOOK_THREADS = 8
_HOOK_EXECUTOR = ThreadPoolExecutor(max_workers=HOOK_THREADS, thread_name_prefix="hook")

# Said while a tool runs past --tool-filler-ms, then one more each --tool-filler-repeat-ms.
# Each differs from the others: an answer stops at a chunk it already said (reply/pipeline.py).
DEFAULT_FILLERS = ("One moment while I check that.", "Still working on it.", "Thanks for waiting, nearly there.")

Hook = Callable[..., Awaitable[None] | None]


@dataclass
class CallAction:
    """Call control the agent asked for; carried out once its current answer has been spoken."""

    kind: str  # "end" or "transfer"
    to: str = ""  # the transfer target (a phone number or SIP URI on Twilio)
    reason: str = ""


@dataclass
class CallContext(ToolContext):
    """One session as the agent sees it. Hooks and tools may read and change it."""

    session_id: str
    protocol: str  # "ws", "realtime", "twilio" or "telnyx"
    options: dict[str, Any]  # the client's start options; on a phone call, its custom parameters
    instructions: str
    greeting: str
    tools: list[Tool]
    call_id: str | None = None  # Twilio's CallSid, Telnyx's call_control_id
    data: dict[str, Any] = field(default_factory=dict)  # anything the agent keeps per session
    action: CallAction | None = None

    def end_call(self, reason: str = "") -> None:
        """End the session once the sentence being spoken is finished."""
        self.action = CallAction("end", reason=reason)

    def transfer_call(self, to: str) -> None:
        """Hand the call over to ``to`` (an E.164 number or a SIP URI) once the sentence being spoken is finished.

        Any other target raises :class:`~voice_agent.agent.dial_targets.InvalidTransferTarget`: a tool that
        passes on what a caller said gets that error, and nothing is dialled."""
        self.action = CallAction("transfer", to=checked_transfer_target(to))


@dataclass
class Agent:
    """A voice agent: instructions, an optional greeting, a voice, tools and hooks.

    Hooks may be plain or ``async`` functions: an ``async`` one runs on the
    event loop, a plain one in a worker thread, so that neither a slow one nor
    a blocking one holds up other sessions. Each gets ``--agent-hook-timeout-s``:
    past it an ``async`` hook is cancelled (a thread cannot be: the session
    stops waiting for it), a warning is logged, and the session goes on. A
    hook that raises is logged and the session goes on.

    - ``on_session_start(context)``: before the greeting; may change
      ``context.instructions``, ``greeting``, ``tools`` and ``data``.
    - ``on_user_turn(context, text)``: a user turn was committed.
    - ``on_answer(context, text, interrupted)``: an answer ended; ``text`` is what the user heard.
    - ``on_session_end(context, report)``: the session is over; ``report`` is its :class:`SessionReport`.
    """

    instructions: str = DEFAULT_SYSTEM_PROMPT
    greeting: str = ""
    # A Piper voice (.onnx). Voices load once per process, so this one serves every session.
    voice: str = ""
    tools: Sequence[Tool | Callable[..., Any]] = ()
    fillers: Sequence[str] = DEFAULT_FILLERS
    on_session_start: Hook | None = None
    on_user_turn: Hook | None = None
    on_answer: Hook | None = None
    on_session_end: Hook | None = None

    def __post_init__(self) -> None:
        tools = [as_tool(t) for t in self.tools]
        self.tools = tools
        names = [t.name for t in tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"two tools share the name {', '.join(duplicates)}")

    def context(self, session_id: str, protocol: str, options: dict[str, Any], call_id: str | None) -> CallContext:
        """A fresh context for one session, before its start hook."""
        return CallContext(
            session_id=session_id,
            protocol=protocol,
            options=options,
            instructions=self.instructions,
            greeting=self.greeting,
            tools=[as_tool(t) for t in self.tools],
            call_id=call_id,
        )


def client_prompt_and_greeting(context: CallContext) -> None:
    """The plain assistant's start hook: the client's ``system_prompt`` and ``greeting`` start options apply."""
    prompt, greeting = context.options.get("system_prompt"), context.options.get("greeting")
    if isinstance(prompt, str) and prompt.strip():
        context.instructions = prompt.strip()
    if isinstance(greeting, str) and greeting.strip():
        context.greeting = greeting.strip()


async def call_hook(hook: Hook | None, *args: Any, timeout_s: float | None = None) -> None:
    """Run a hook, async on the loop or sync in a worker thread, for at most ``timeout_s`` (None: no limit);
    its failure or timeout is logged, never raised."""
    if hook is None:
        return
    name = getattr(hook, "__name__", type(hook).__name__)
    try:
        await asyncio.wait_for(_run_hook(hook, args), timeout_s)
    except TimeoutError:
        log.warning("agent hook %s did not finish within %.1f s; the session goes on without it", name, timeout_s)
    except Exception:
        log_exception(log, "agent hook %s failed", name)


async def _run_hook(hook: Hook, args: tuple[Any, ...]) -> None:
    if inspect.iscoroutinefunction(hook):
        await hook(*args)
        return
    # The session's context (its id on log lines) goes with the call into the thread.
    run = functools.partial(contextvars.copy_context().run, hook, *args)
    result = await asyncio.get_running_loop().run_in_executor(_HOOK_EXECUTOR, run)
    if inspect.isawaitable(result):  # a plain function that returns a coroutine
        await result


def agent_from_settings(settings: Settings) -> Agent:
    """The agent ``--agent`` names; without one, the plain assistant as an agent, for its session reports."""
    if settings.agent:
        return load_agent(settings.agent)
    return Agent(instructions=settings.system_prompt, on_session_start=client_prompt_and_greeting)


def load_agent(spec: str) -> Agent:
    """The :class:`Agent` named by ``MODULE_OR_FILE:NAME`` (``examples/restaurant/agent.py:agent``, ``pkg.mod:agent``)."""
    source, _, name = spec.rpartition(":")
    if not source or not name:
        raise ValueError(f"--agent {spec!r}: expected MODULE_OR_FILE:NAME, e.g. examples/restaurant/agent.py:agent")
    if source.endswith(".py") or "/" in source or "\\" in source:
        path = Path(source).resolve()
        if not path.is_file():
            raise ValueError(f"--agent {spec!r}: no file {path}")
        module_name = f"voice_agent_user_{path.stem}"
        loader_spec = importlib.util.spec_from_file_location(module_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ValueError(f"--agent {spec!r}: cannot import {path}")
        module = importlib.util.module_from_spec(loader_spec)
        # Its folder is importable, as when Python runs a file: an agent may keep its helpers beside it.
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        sys.modules[module_name] = module  # dataclasses and pickling look modules up by name
        loader_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(source)
    if not hasattr(module, name):
        raise ValueError(f"--agent {spec!r}: {source} has no {name}")
    agent = getattr(module, name)
    if callable(agent) and not isinstance(agent, Agent):
        agent = agent()  # a factory
    if not isinstance(agent, Agent):
        raise ValueError(f"--agent {spec!r}: {name} is {type(agent).__name__}, not a voice_agent.Agent")
    return agent
