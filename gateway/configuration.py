"""Loading the configuration for the command line: errors an operator can act on, and a
start-up summary that shows every effective setting and no secret.

pydantic reports field names (``port``) and the offending input; an operator sets
environment variables (``GATEWAY_PORT``), and the input may be a secret (a malformed
``GATEWAY_API_KEYS`` holds the keys). ``load_settings`` reports each problem on one
line that names the variable and never quotes what it was set to.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson
from pydantic import AliasChoices, BaseModel, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsError

from gateway.ratelimit import Rate
from gateway.settings import ApiKeyEntry, Settings
from gateway.trace_export import TraceExportError, plan

__all__ = [
    "ConfigurationError",
    "load_settings",
    "setting_names",
    "shown_url",
    "summary",
    "unknown_variables",
]

# A setting whose name holds one of these words is a secret: its value is never shown.
_SECRET_WORDS = frozenset(
    {"key", "keys", "secret", "secrets", "token", "tokens", "password", "headers", "credentials"}
)
# Settings whose mapping keys are themselves secrets (API keys -> principals).
_SECRET_MAP_KEYS = frozenset({"api_keys"})
_REDIS_SCHEMES = frozenset({"redis", "rediss", "unix", "redis+cluster", "rediss+cluster"})


class ConfigurationError(Exception):
    """The environment does not make a valid configuration; ``problems`` has one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def _is_secret(name: str) -> bool:
    return not _SECRET_WORDS.isdisjoint(name.lower().split("_"))


def _nested(cls: type[BaseSettings]) -> dict[str, type[BaseSettings]]:
    """Fields of ``cls`` that are settings of their own (``cortadel``: GATEWAY_CORTADEL_*)."""
    out = {}
    for name, info in cls.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseSettings):
            out[name] = kind
    return out


def _env_names(cls: type[BaseSettings], field: str) -> list[str]:
    info = cls.model_fields.get(field)
    alias = info.validation_alias if info is not None else None
    if isinstance(alias, AliasChoices):
        return [c for c in alias.choices if isinstance(c, str)]
    if isinstance(alias, str):
        return [alias]
    prefix = str(cls.model_config.get("env_prefix", ""))
    return [f"{prefix}{field}".upper()]


def _env_name(cls: type[BaseSettings], field: str) -> str:
    """The variable the operator set for ``field`` (of several aliases, the one set)."""
    names = _env_names(cls, field)
    return next((n for n in names if n in os.environ), names[0])


def setting_names(cls: type[BaseSettings] = Settings) -> set[str]:
    """Every environment variable the settings read, the nested settings' included."""
    out: set[str] = set()
    nested = _nested(cls)
    for field in cls.model_fields:
        if field in nested:
            out |= setting_names(nested[field])
        else:
            out |= set(_env_names(cls, field))
    return out


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One line per ``GATEWAY_*`` variable that is no setting (a misspelt name is ignored
    otherwise), with the nearest setting's name when one is close."""
    known = setting_names()
    out = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith("GATEWAY_") or upper in known:
            continue
        near = difflib.get_close_matches(upper, known, n=1, cutoff=0.75)
        hint = f" (did you mean {near[0]}?)" if near else ""
        out.append(f"{name}: not a setting of the gateway{hint}")
    return out


def _secret_strings() -> Iterator[str]:
    """What secret variables are set to (and, for JSON ones, the strings inside)."""
    keyed = {n for f in _SECRET_MAP_KEYS for n in _env_names(Settings, f)}
    for name, value in os.environ.items():
        upper = name.upper()
        if not (upper.startswith("GATEWAY_") or upper == "REDIS_URL"):
            continue
        if not (_is_secret(upper) or upper.endswith("_URL")):
            continue
        yield value
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            continue
        if isinstance(parsed, dict):
            for key, inner in parsed.items():
                if upper in keyed:
                    yield key
                elif isinstance(inner, str):
                    yield inner


def _scrubbed(line: str) -> str:
    # Belt and braces: no message may quote a secret, whatever a validator put in it.
    for secret in sorted(set(_secret_strings()), key=len, reverse=True):
        if len(secret) >= 4:
            line = line.replace(secret, "***")
    return line


def _problems(exc: ValidationError, cls: type[BaseSettings]) -> list[str]:
    out = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        loc = [str(part) for part in error["loc"]]
        message = str(error["msg"]).removeprefix("Value error, ")
        if not loc:  # a check across fields; its message names the variables
            out.append(message)
            continue
        field, rest = loc[0], loc[1:]
        if field in _SECRET_MAP_KEYS and rest:
            rest = ["<key>", *rest[1:]]
        where = f" ({'.'.join(rest)})" if rest else ""
        out.append(f"{_env_name(cls, field)}{where}: {message}")
    return out


def _parse_failure(exc: SettingsError) -> str:
    found = re.search(r'field "([^"]+)"', str(exc))
    if found is None:
        return "the environment could not be read"
    field = found.group(1)
    classes: list[type[BaseSettings]] = [Settings, *_nested(Settings).values()]
    owner = next((c for c in classes if field in c.model_fields), Settings)
    return f"{_env_name(owner, field)}: not valid JSON"


def _checks(settings: Settings) -> list[str]:
    """What pydantic lets through but would fail later with a traceback."""
    try:
        plan(os.environ, settings.otlp_endpoint, settings.trace_sample_ratio)
    except TraceExportError as exc:
        return [str(exc), *_redis_checks(settings)]
    return _redis_checks(settings)


def _redis_checks(settings: Settings) -> list[str]:
    url = settings.redis_url
    if url is None:
        return []
    name = _env_name(Settings, "redis_url")
    if not url.strip():
        return [f"{name}: empty (unset it to use the embedded redis-server)"]
    if urlsplit(url).scheme.lower() not in _REDIS_SCHEMES:
        schemes = ", ".join(f"{s}://" for s in sorted(_REDIS_SCHEMES))
        return [f"{name}: the scheme must be one of {schemes}"]
    return []


def load_settings() -> Settings:
    """The settings from the environment, or ``ConfigurationError`` listing every problem
    (the long-term memory settings' and the others', in one go)."""
    problems: list[str] = []
    nested = _nested(Settings)
    stand_ins: dict[str, Any] = {}
    while True:
        try:
            settings = Settings(**stand_ins)
        except SettingsError as exc:
            problems.append(_parse_failure(exc))
            break
        except ValidationError as exc:
            field = next(
                (f for f, c in nested.items() if c.__name__ == exc.title and f not in stand_ins),
                None,
            )
            if field is None:
                problems += _problems(exc, Settings)
                break
            # A nested settings class failed on its own: report it, then go on with a
            # stand-in to find the other problems as well.
            problems += _problems(exc, nested[field])
            stand_ins[field] = nested[field].model_construct()
            continue
        problems += _checks(settings)
        if not problems:
            return settings
        break
    raise ConfigurationError([_scrubbed(p) for p in problems])


def shown_url(value: str) -> str:
    """A URL without its password or secret-looking query values."""
    try:
        parts = urlsplit(value)
        password = parts.password
    except ValueError:
        return "set (not a valid URL)"
    netloc = parts.netloc
    if password is not None:
        userinfo, _, host = netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        netloc = f"{user}:***@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if _is_secret(k) else v) for k, v in pairs], safe="*")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _shown(name: str, value: Any) -> Any:
    if isinstance(value, BaseModel) and not isinstance(value, ApiKeyEntry):
        return {field: _shown(field, getattr(value, field)) for field in type(value).model_fields}
    if value is None:
        return None
    if isinstance(value, Rate):
        return str(value)
    if name in _SECRET_MAP_KEYS and isinstance(value, Mapping):
        tenants = {e.tenant for e in value.values() if isinstance(e, ApiKeyEntry)}
        return {"keys": len(value), "tenants": len(tenants)}
    if isinstance(value, SecretStr) or _is_secret(name):
        if isinstance(value, Mapping | list | tuple | set):
            return f"{len(value)} set"
        secret = value.get_secret_value() if isinstance(value, SecretStr) else value
        return "set" if secret else "empty"
    if isinstance(value, str) and "://" in value:
        return shown_url(value)
    if isinstance(value, list) and any(isinstance(v, BaseModel) for v in value):
        return [_shown(name, v) for v in value]
    if isinstance(value, list) and any(isinstance(v, str) and "://" in v for v in value):
        return [shown_url(v) if isinstance(v, str) else v for v in value]
    return value


def summary(settings: Settings) -> dict[str, Any]:
    """Every effective setting, by field name (``GATEWAY_<NAME>``), secrets as counts or
    "set"; long-term memory as ``"off"`` unless Cortadel is configured."""
    out = {name: _shown(name, getattr(settings, name)) for name in type(settings).model_fields}
    out["open_mode"] = settings.open_mode
    export = plan(os.environ, settings.otlp_endpoint, settings.trace_sample_ratio)
    out["tracing"] = "off" if export is None else export.describe()
    if export is not None and export.endpoint is not None:
        out["tracing"]["endpoint"] = shown_url(export.endpoint)
    if not settings.cortadel.enabled:
        out["cortadel"] = "off"
    return out
