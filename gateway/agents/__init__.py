"""Agent backends behind one small protocol."""
