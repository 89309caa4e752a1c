"""Benchmarks and evals: voice-agent bench SUBCOMMAND."""
