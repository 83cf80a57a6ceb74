"""The composition root under the app factory and the command line: every part of a process,
built from settings in one place.

``connections`` (the Redis clients), ``stores`` (every store over them), ``api_keys`` (the
API-key service `gateway keys` shares with the app), ``clients`` (the outbound HTTP clients),
``memory`` (the embedder, search and long-term memory), ``execution`` (the agents, task events
and the run executor), ``background`` (the run queue, indexer, outbox, deliverer and
maintenance), ``runtime`` (``Runtime``: the parts started and stopped together) and
``services`` (the use cases a served process's bindings call). This module imports none of
them: a command loads only the parts it builds.
"""
