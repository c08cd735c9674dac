"""Benchmarks behind ``rsi bench …`` (measured targets of each issue); not tests."""
