"""Imports point down the layers of docs/ARCHITECTURE.md ("Layers").

Every module of ``gateway`` belongs to one layer, top first. A module may import its own
package and anything in a lower layer. Within a layer, members separated by ``|`` must not
import one another; members separated by ``:`` may. The modules at the package root sit in
named sub-layers (``ROOT_SUBLAYERS``), ordered the same way. Imports under ``TYPE_CHECKING``
and inside functions count too, and so does ``importlib.import_module`` of a module named
by a literal: a dependency is a dependency. A module imported by a name known only at run
time (``DYNAMIC``) is outside the package: the agent plugins ``GATEWAY_AGENT_PLUGINS`` names
(``tests/test_agent_plugins.py``) and the httpcore of the httpx in use.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent / "gateway"

# The modules at the package root, in named sub-layers, top first. Each sub-layer's rows are
# layers like the packages' above (``|`` and all): the root has no free-for-all.
ROOT_SUBLAYERS = {
    # typed results in each binding's spelling, and the bindings' spellings read back
    "wire formats": ["canonical | dialects"],
    # what clients send, typed, and what the services return
    "core types": ["models"],
    # spans, metrics, log lines, the garbage collector's pauses
    "observability": ["genai_spans | gc_pauses", "tracing | metrics | logs"],
    # the settings read from the environment and checked; what they are made of
    "configuration": ["configuration", "settings", "options | trace_export | ratelimit"],
    # A2A's task states and output modes, typed input checks, the search modes
    "protocol vocabulary": ["a2a | validation | search_mode"],
    # the embedded redis-server and its supervisor; where outbound requests may go
    "processes and reach": ["redis_supervisor | outbound", "embedded_redis"],
    # value objects, ids, time, randomness, retries and the errors every layer raises
    "primitives": ["api_keys | principal | ids | clock | backoff", "entropy | errors"],
}

LAYERS = [
    "cli",
    "app",
    "runtime",
    "grpcapi",
    "http",
    "service",
    "engine",
    "longterm",
    "context_memory | agents | push",
    "identity | audit | stream_consumer",
    "store",
    *(row for rows in ROOT_SUBLAYERS.values() for row in rows),
]

# A root module's sub-layer, named in a failure.
_SUBLAYER = {
    member.strip(): name
    for name, rows in ROOT_SUBLAYERS.items()
    for row in rows
    for member in row.split("|")
}

# (importer, imported) -> why the import may point up or sideways. Keep it empty.
ALLOWED: dict[tuple[str, str], str] = {}

# Modules that import a module by a name computed at run time -> what they import so.
DYNAMIC = {
    "gateway.agents.plugins": "the agents GATEWAY_AGENT_PLUGINS names, code of the deployment's",
    "gateway.outbound.pinning": "httpcore or httpcore2, as the httpx client in use needs",
}
_IMPORTERS = {"import_module", "__import__"}


def _member(module: str) -> tuple[int, str, bool]:
    """(layer index, member, whether the layer's members may import one another)."""
    name = module.removeprefix("gateway.")
    for index, layer in enumerate(LAYERS):
        shared = ":" in layer
        for member in layer.replace(":", "|").split("|"):
            member = member.strip()
            if name == member or name.startswith(member + "."):
                return index, member, shared
    raise AssertionError(
        f"{module} is in no layer: add it to LAYERS (a root module to ROOT_SUBLAYERS) and "
        "ARCHITECTURE.md"
    )


def _named(module: str, member: str) -> str:
    """The module, with its sub-layer when it sits at the package root."""
    return f"{module} ({_SUBLAYER[member]})" if member in _SUBLAYER else module


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _dynamic_imports(tree: ast.AST) -> list[ast.expr]:
    """The name arguments of ``importlib.import_module(...)`` and ``__import__(...)``."""
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and node.args]
    return [
        call.args[0]
        for call in calls
        if (isinstance(call.func, ast.Attribute) and call.func.attr in _IMPORTERS)
        or (isinstance(call.func, ast.Name) and call.func.id in _IMPORTERS)
    ]


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    tree = ast.parse(path.read_text())
    for name in _dynamic_imports(tree):
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            found.add(name.value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            found |= {
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            }
    return {name for name in found if name in known and name != "gateway"}


def test_imports_point_down_the_layers() -> None:
    modules = _modules()
    broken = []
    for module, path in sorted(modules.items()):
        if module == "gateway":
            continue
        layer, member, _ = _member(module)
        for target in sorted(_imports(module, path, set(modules))):
            to_layer, to_member, shared = _member(target)
            down = to_layer > layer or to_member == member or (to_layer == layer and shared)
            if not down and (module, target) not in ALLOWED:
                broken.append(f"{_named(module, member)} -> {_named(target, to_member)}")
    assert not broken, "imports against the layers:\n" + "\n".join(broken)


def test_every_allowed_exception_is_still_needed() -> None:
    modules = _modules()
    for module, target in ALLOWED:
        assert target in _imports(module, modules[module], set(modules)), (module, target)


def test_modules_imported_by_a_run_time_name_are_known() -> None:
    found = {
        module
        for module, path in _modules().items()
        if any(
            not isinstance(name, ast.Constant)
            for name in _dynamic_imports(ast.parse(path.read_text()))
        )
    }
    assert found == set(DYNAMIC)


# What names a user's keys; only the store's modules use it (the rest hand it the principal).
KEY_NAMERS = {"keys_of", "UserKeys"}


def _names(tree: ast.AST) -> set[str]:
    """Every name a module imports, reads or reaches as an attribute."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.alias):
            found.add(node.name)
        elif isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


def test_only_the_store_names_keys() -> None:
    naming = [
        module
        for module, path in sorted(_modules().items())
        if module != "gateway.store"
        and not module.startswith("gateway.store.")
        and _names(ast.parse(path.read_text())) & KEY_NAMERS
    ]
    assert not naming, "keys named outside the store (pass it the principal):\n" + "\n".join(naming)
