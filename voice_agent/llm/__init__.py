"""LLM backends behind one interface; see :mod:`voice_agent.llm.base`."""
