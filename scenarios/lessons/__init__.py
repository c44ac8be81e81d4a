"""Scenario files of ``servesim lessons`` (each experiment starts from one and overrides a few fields)."""
