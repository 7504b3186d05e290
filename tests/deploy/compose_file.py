"""Read docker-compose.yml the way Compose does, without a Docker engine.

``load_compose()`` parses the file with PyYAML (anchors and ``<<`` merge keys resolved) and
``interpolate()`` substitutes ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}`` and
``${VAR:?message}`` from a given environment, as Compose does before it validates.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
#: Debian's docker-compose package ships the compose-spec JSON schema it validates with.
DEBIAN_COMPOSE_SCHEMA = Path("/usr/lib/python3/dist-packages/compose/config/compose_spec.json")

_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])((?:[^{}])*))?\}")


class MissingVariable(ValueError):
    """A ``${VAR:?message}`` whose variable is unset or empty."""


def load_compose(path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The compose file as Python data (anchors and merge keys resolved, no interpolation)."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """``value`` with every ``${...}`` substituted from ``env`` (recursively through lists and dicts)."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, operator, argument = match.group(1), match.group(2), match.group(3)
        current = env.get(name)
        if operator in (":-", "-"):
            unset = current is None or (operator == ":-" and current == "")
            return argument if unset else current
        if operator in (":?", "?"):
            if current is None or (operator == ":?" and current == ""):
                raise MissingVariable(f"{name}: {argument}")
            return current
        return current or ""

    return _VARIABLE.sub(substitute, value)


def host_ports(service: dict[str, Any]) -> list[int]:
    """Host ports a service publishes (short syntax ``"HOST:CONTAINER"`` and long syntax)."""
    ports = []
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            if entry.get("published") is not None:
                ports.append(int(entry["published"]))
            continue
        parts = str(entry).split("/")[0].split(":")
        if len(parts) >= 2:
            ports.append(int(parts[-2]))
    return ports


def bind_sources(service: dict[str, Any]) -> list[str]:
    """Host paths a service bind-mounts (``./x:/y[:ro]`` and long syntax ``type: bind``)."""
    sources = []
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            if entry.get("type") == "bind":
                sources.append(entry["source"])
            continue
        source = str(entry).split(":")[0]
        if source.startswith((".", "/")):
            sources.append(source)
    return sources


def named_volumes(service: dict[str, Any]) -> list[str]:
    """Named volumes a service mounts."""
    names = []
    for entry in service.get("volumes", []):
        source = entry.get("source") if isinstance(entry, dict) else str(entry).split(":")[0]
        if source and not source.startswith((".", "/", "~")):
            names.append(source)
    return names


def mount_targets(service: dict[str, Any]) -> list[str]:
    """Container paths where a service mounts something."""
    targets = []
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            targets.append(entry["target"])
        else:
            targets.append(str(entry).split(":")[1])
    return targets
