"""Redis persistence: the keyspace, its Lua scripts, and the store built on them."""
