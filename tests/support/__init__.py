"""Test helpers shared by the test suites."""
