"""A2A v0.3.0 gateway between clinical applications and AI agents."""

__version__ = "0.1.0"
