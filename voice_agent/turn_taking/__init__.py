"""Turn taking: who has the floor in one conversation, the user's turns, and the agent's answers (docs/session.md)."""
