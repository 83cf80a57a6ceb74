"""Use cases: typed inputs in, A2A JSON out. No HTTP here, no Redis commands here."""
