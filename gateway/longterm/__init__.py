"""Long-term memory through Cortadel: recall before a run, durable store after, scrub."""
