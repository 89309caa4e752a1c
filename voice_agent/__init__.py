"""voice-agent: a real-time voice agent over one WebSocket."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Agent", "CallContext", "ToolError", "tool", "create_app"]

if TYPE_CHECKING:
    from .agent.agent import Agent, CallContext
    from .agent.tools import ToolError, tool
    from .server.app import create_app


def __getattr__(name: str) -> Any:
    # Imported on first use: `python -m voice_agent` and the replay client need none of the server's modules.
    if name in ("Agent", "CallContext"):
        from .agent import agent

        return getattr(agent, name)
    if name in ("tool", "ToolError"):
        from .agent import tools

        return getattr(tools, name)
    if name == "create_app":
        from .server.app import create_app

        return create_app
    raise AttributeError(f"module 'voice_agent' has no attribute {name!r}")
