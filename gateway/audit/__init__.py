"""The audit trail: who did what to which ids, when, with what outcome — never content."""
