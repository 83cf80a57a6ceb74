"""The Lua scripts spell no name they share with Python: every task field, meta field, mark,
channel, group, stream entry field and task state comes from the Python definitions
(``store/fields.py``, ``store/keys.py``, ``a2a.py``) through the generated prelude, so a
rename is one edit; and every script is in the ``store/lua`` package."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any

from gateway import a2a
from gateway.a2a import INTERRUPTED, TERMINAL
from gateway.store import fields, lua
from gateway.store.keys import (
    EVENT_CHANNEL,
    JOBS_GROUP,
    SIGNAL_ARTIFACT,
    SIGNAL_INTERRUPTED,
    SIGNAL_NEXT,
    STOP_CHANNEL,
)
from gateway.store.lua import Scripts, contract, prelude
from gateway.store.lua.longterm import LedgerArgs, RememberArgs
from gateway.store.lua.streams import ResignArgs

_GENERATED = contract.CONSTANTS


class _Sources:
    """A client that registers a script as its source."""

    def register_script(self, source: str) -> str:
        return source


def _scripts() -> dict[str, str]:
    """Every registered script's whole source, by its name in ``Scripts``."""
    registered: Any = Scripts.register(_Sources())
    return {f.name: getattr(registered, f.name) for f in dataclasses.fields(registered)}


def _bodies() -> dict[str, str]:
    """Each script's own text: its source without the generated constants and comments."""
    return {
        name: re.sub(r"--[^\n]*", "", value.replace(_GENERATED, ""))
        for name, value in _scripts().items()
    }


def test_scripts_spell_no_shared_name() -> None:
    meta = [v for k, v in vars(fields).items() if k.startswith("META_")]
    names = [*meta, fields.PENDING_MARK, fields.LOCAL_MARK, EVENT_CHANNEL, STOP_CHANNEL, JOBS_GROUP]
    assert _bodies()
    for name, body in _bodies().items():
        assert not re.findall(r"'(:[a-z]+:?)'", body), name  # a task field suffix
        spelled = [n for n in names if f", '{n}'" in body]  # as a command's argument
        assert not spelled, (name, spelled)
        assert "TERMINAL = {" not in body, name


def test_scripts_spell_no_state_nor_entry_field() -> None:
    """The task states the scripts write and compare, the signals they publish, and the
    fields of the job streams' and the event streams' entries are generated, never quoted in
    a script."""
    states = {*TERMINAL, *INTERRUPTED, a2a.SUBMITTED, a2a.WORKING}
    entry_fields = {
        fields.ENTRY_JOB,
        fields.ENTRY_SEQ,
        fields.ENTRY_FORGET,
        fields.EVENT_KIND,
        fields.EVENT_DATA,
    }
    signals = {f"{s}|" for s in (SIGNAL_NEXT, SIGNAL_INTERRUPTED, SIGNAL_ARTIFACT)}
    for name, body in _bodies().items():
        quoted = set(re.findall(r"'([^'\n]*)'", body))
        assert not quoted & states, (name, quoted & states)
        assert not quoted & entry_fields, (name, quoted & entry_fields)
        assert not quoted & signals, (name, quoted & signals)  # the events channel's signals


def test_every_script_is_in_the_lua_package() -> None:
    """No module of the gateway outside ``store/lua`` registers or holds a Lua script."""
    package = Path(lua.__file__).parent
    root = package.parent.parent
    elsewhere = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if package not in path.parents
        and re.search(r"register_script|redis\.call\(", path.read_text())
    ]
    assert not elsewhere


def test_prelude_defines_every_shared_name() -> None:
    for name, value in contract.LUA_NAMES.items():
        assert re.search(rf"^local {name} = '?{re.escape(str(value))}'?$", _GENERATED, re.M)
    for state in TERMINAL:
        assert f"['{state}'] = true" in _GENERATED


def test_scripts_name_their_args() -> None:
    """No script reads a numbered ARGV: its args are locals generated from its NamedTuple."""
    generated = re.compile(r"^local [a-z_, ]+ = ARGV\[1\][^\n]*$", re.M)
    for name, body in _bodies().items():
        assert not re.findall(r"ARGV\[\d+\]", generated.sub("", body)), name


def test_scripts_define_where_their_rest_args_begin() -> None:
    for name, value in _scripts().items():
        for rest in set(re.findall(r"\b(\w+_from)\b", value)):
            assert f"local {rest} = " in value, (name, rest)


def test_push_deliveries_are_built_from_the_python_field_names() -> None:
    """``notify`` writes a delivery's JSON and reads a config's routing facts by the names
    ``push/events.py`` and ``push_records.py`` use, never by keys of its own."""
    notify = prelude.PRELUDE[prelude.PRELUDE.index("local function notify") :]
    notify = notify[: notify.index("\nend\n") + 5]
    assert "cjson.encode({" not in notify and ".a)" not in notify and "w[2].t" not in notify
    for name in ("D_TENANT", "D_TASK", "D_NUMBER", "D_QUEUED", "C_ARTIFACTS", "C_USER"):
        assert f"[{name}]" in notify, name


def test_every_lua_text_is_short() -> None:
    """Each Lua text in the package, a script or a part of one, is at most 80 lines: a longer
    script is written in parts (``send``, ``update``) or shares helpers through the prelude."""
    package = Path(lua.__file__).parent
    long = []
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and "redis." in node.value
                and node.value.count("\n") > 80
            ):
                long.append(f"{path.name}:{node.lineno}")
    assert not long


def test_arguments_encode_in_field_order_with_the_rest_spread() -> None:
    args = RememberArgs(now=5, keep=2, ids=["a", "b"])
    assert args.argv() == [5, 2, "a", "b"]
    assert RememberArgs.lua() == "local now, keep = ARGV[1], ARGV[2]\nlocal ids_from = 3\n"
    assert ResignArgs("node-1").argv() == ["node-1"]
    assert LedgerArgs(["m1"]).argv() == ["m1"]
    assert LedgerArgs.lua() == "local ids_from = 1\n"
