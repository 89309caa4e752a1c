"""LLM backends behind one interface; see :mod:`voice_agent.engines.llm.base`."""
