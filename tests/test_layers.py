"""Imports point down the layers of docs/ARCHITECTURE.md ("Layers").

Every module of ``gateway`` belongs to one layer, top first. A module may import its own
package and anything in a lower layer. Within a layer, members separated by ``|`` must not
import one another; members separated by ``:`` may. Imports under ``TYPE_CHECKING`` and
inside functions count too: a dependency is a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent / "gateway"

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
    "configuration : settings : options : models : canonical : protojson : dialects"
    " : validation"
    " : outbound : principal : a2a : search_mode : tracing : trace_export : genai_spans"
    " : metrics : gc_pauses : logs : embedded_redis : redis_supervisor : ratelimit : backoff"
    " : ids : clock : entropy : api_keys : errors",
]

# (importer, imported) -> why the import may point up or sideways. Keep it empty.
ALLOWED: dict[tuple[str, str], str] = {}


def _member(module: str) -> tuple[int, str, bool]:
    """(layer index, member, whether the layer's members may import one another)."""
    name = module.removeprefix("gateway.")
    for index, layer in enumerate(LAYERS):
        shared = ":" in layer
        for member in layer.replace(":", "|").split("|"):
            member = member.strip()
            if name == member or name.startswith(member + "."):
                return index, member, shared
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and ARCHITECTURE.md")


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
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
                broken.append(f"{module} -> {target}")
    assert not broken, "imports against the layers:\n" + "\n".join(broken)


def test_every_allowed_exception_is_still_needed() -> None:
    modules = _modules()
    for module, target in ALLOWED:
        assert target in _imports(module, modules[module], set(modules)), (module, target)
