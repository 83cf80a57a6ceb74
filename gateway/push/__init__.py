"""Push notifications: webhook configs (``configs``), the signing keys and their JWKS
(``signing``), queued events and their payloads (``events``), and the deliverer that drains
the durable outbox (``deliverer``)."""
