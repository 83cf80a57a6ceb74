"""The Lua scripts spell no name they share with Python: every task field, meta field, mark,
channel and group comes from the Python definitions (``store/fields.py``, ``store/keys.py``,
``a2a.py``) through the generated prelude, so a rename is one edit."""

from __future__ import annotations

import re

from gateway.a2a import TERMINAL
from gateway.store import fields, scripts
from gateway.store.keys import EVENT_CHANNEL, JOBS_GROUP

_GENERATED = scripts._CONSTANTS


def _bodies() -> dict[str, str]:
    """Each script's own text: its source without the generated constants and comments."""
    return {
        name: re.sub(r"--[^\n]*", "", value.replace(_GENERATED, ""))
        for name, value in vars(scripts).items()
        if name.startswith("_")
        and name.isupper()
        and isinstance(value, str)
        and "redis.call" in value
    }


def test_scripts_spell_no_shared_name() -> None:
    meta = [v for k, v in vars(fields).items() if k.startswith("META_")]
    names = [*meta, fields.PENDING_MARK, fields.LOCAL_MARK, EVENT_CHANNEL, JOBS_GROUP]
    assert _bodies()
    for name, body in _bodies().items():
        assert not re.findall(r"'(:[a-z]+:?)'", body), name  # a task field suffix
        # as a command's argument ('seq' is also the job streams' entry field, spelled)
        spelled = [n for n in names if f", '{n}'" in body and n != fields.META_SEQ]
        assert not spelled, (name, spelled)
        assert "TERMINAL = {" not in body, name


def test_prelude_defines_every_shared_name() -> None:
    for name, value in scripts.LUA_NAMES.items():
        assert re.search(rf"^local {name} = '?{re.escape(str(value))}'?$", _GENERATED, re.M)
    for state in TERMINAL:
        assert f"['{state}'] = true" in _GENERATED


def test_scripts_name_their_args() -> None:
    """No script reads a numbered ARGV: its args are locals generated from its NamedTuple."""
    generated = re.compile(r"^local [a-z_, ]+ = ARGV\[1\][^\n]*$", re.M)
    for name, body in _bodies().items():
        assert not re.findall(r"ARGV\[\d+\]", generated.sub("", body)), name


def test_scripts_define_where_their_rest_args_begin() -> None:
    for name, value in vars(scripts).items():
        if name.startswith("_") and name.isupper() and isinstance(value, str):
            for rest in set(re.findall(r"\b(\w+_from)\b", value)):
                assert f"local {rest} = " in value, (name, rest)
