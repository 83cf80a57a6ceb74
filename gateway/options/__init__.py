"""Configuration value objects that settings and the feature packages share (pure).

``longterm``: long-term memory defaults and per-agent overrides; ``identity``: the identity
providers whose bearer tokens are accepted; ``keyring``: the encryption keys of content at
rest. They sit below the packages that use them, so ``settings`` and ``agents`` need not
import ``longterm``, ``identity`` or ``store``.
"""
