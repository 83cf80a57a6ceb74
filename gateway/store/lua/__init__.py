"""Every Lua script of the gateway, one module per aggregate, each with its scripts, their
arguments and their reply parsers.

``contract`` holds what every script shares with Python (the generated names, the
arguments' encoding, the context's key locals) and ``prelude`` the Lua every context script
starts with; then ``send`` (a user message stored, its run started), ``run`` (a run begun,
a cluster's queued job recorded), ``update`` (a run's writes), ``context`` (a task
canceled, a context scrubbed, a task's snapshot for its event log), ``vectors``,
``longterm`` (recalled and added memories), ``push`` (webhook configs and a cluster's
waiting deliveries), ``streams`` (the job streams' lead and consumers, dead letters),
``registry`` (the agent registry), ``rotation`` (values sealed again) and ``limits`` (rate
limits, API keys). ``Scripts`` registers them all once per client.

Each context script takes the fourteen keys of ``ContextKeys.all()`` in that order (the
context's thirteen and the user's running tasks; Lua locals named after its fields, e.g.
``TASKS``), then the job streams, so it may read and write the whole context atomically
and refresh the sliding TTL of every key it owns in O(1). On Redis Cluster the job streams
live in another slot, so they are not passed: the scripts then leave the streams alone and
the store queues and acknowledges jobs in a second step.

A context whose meta key is missing is dead (scrubbed or expired): every writer checks the
meta key inside its script, so no late write can resurrect it. Only a send may open a context
under an id it names (``SendArgs.mode`` 'named'), never one scrubbed within the retention:
the scrub leaves a tombstone (``GONE``) for that long.

The Lua is written as strings in these modules, not as ``.lua`` files beside them: every
script is assembled in Python from parts that are generated (its names from the Python
definitions, its ARGV locals from its arguments' dataclass) or shared (the prelude, ``add``),
so no file would be a script one could run or read whole on its own, and a script stays
beside the arguments it takes and the parser of its reply. The longest scripts are written
in parts (``send``, ``update``) run as one.
"""

from __future__ import annotations

from gateway.store.lua.scripts import Scripts

__all__ = ["Scripts"]
