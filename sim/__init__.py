"""servesim: a discrete-event simulator of LLM inference serving clusters."""

__version__ = "0.2.0"
