"""A2A v0.3.0 gateway."""
