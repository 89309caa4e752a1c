"""voice-agent: a real-time voice agent over one WebSocket."""

__version__ = "0.1.0"
