"""Reading ``space.yaml`` into a raw mapping, and applying ``--set`` overrides to it.

Pure module (PyYAML is imported inside the functions). Refused, each as one
:class:`~hpsearch.errors.ConfigError`: malformed YAML; a key repeated in one mapping, at
any depth (YAML would silently keep the later one); nesting deeper than
:data:`MAX_DEPTH` levels. ``--set dotted.key=value`` overrides are parsed as YAML
scalars and applied to the raw mapping before validation, so they obey the same rules.
An error about a field written in the file names where (``path:line``, see
:func:`located`); one about a field an override set does not.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from hpsearch.errors import ConfigError

#: Deepest nesting of mappings and lists ``space.yaml`` may have (real ones use about 4).
MAX_DEPTH = 64


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``dotted.key=value`` into the key and the YAML-typed value."""
    import yaml

    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError("--set", "must look like dotted.key=value", text)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(key, f"value is not valid YAML ({_yaml_problem(exc)})", raw) from None
    return key, value


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any] | list[str] | None):
    """Return a deep copy of ``raw`` with dotted-key overrides applied.

    Args:
        raw: The mapping read from ``space.yaml``.
        overrides: ``{"search.n_trials": 3}`` or ``["search.n_trials=3"]``.

    Raises:
        ConfigError: For a malformed override, one that sets a key inside a scalar, or
            ``raw`` nested deeper than :data:`MAX_DEPTH`.
    """
    out = _copy_tree(raw)
    if not overrides:
        return out
    items = (
        [parse_override(o) for o in overrides]
        if isinstance(overrides, list)
        else list(overrides.items())
    )
    for key, value in items:
        node = out
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: i + 1])
                raise ConfigError(where, f"is not a mapping, cannot set '{key}'", child)
            node = child
        node[parts[-1]] = value
    return out


_SCALAR_TYPES = frozenset({int, float, str, bool, type(None)})


def _copy_tree(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the dicts and lists of ``raw`` (scalars are shared: they are immutable).

    Iterative, so that depth costs no stack, and linear: a list of millions of choices
    is copied in one pass. Shared sub-trees (YAML aliases) stay shared, as
    ``copy.deepcopy`` would keep them.
    """
    root: dict[str, Any] = dict(raw)
    copies: dict[int, Any] = {id(raw): root}
    stack: list[tuple[Any, str, int]] = [(root, "", 1)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(path or "space.yaml",
                              f"is nested deeper than {MAX_DEPTH} levels of mappings and lists")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in [(k, v) for k, v in items if type(v) not in _SCALAR_TYPES]:
            if not isinstance(value, (Mapping, list)):
                continue
            done = copies.get(id(value))
            if done is None:
                done = copies[id(value)] = dict(value) if isinstance(value, Mapping) else list(value)
                where = (f"{path}.{key}" if path else str(key)) if isinstance(node, dict) \
                    else f"{path}[{key}]"
                stack.append((done, where, depth + 1))
            node[key] = done
    return root


def _yaml_problem(exc: Exception) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return problem


def parse_yaml(text: str, name: str = "space.yaml",
               lines: dict[str, int] | None = None) -> Any:
    """Parse YAML ``text`` with the checks ``space.yaml`` gets; ``name`` names it in errors.

    Refused, each as one ConfigError: malformed YAML; a key repeated in one mapping, at
    any depth (named by its dotted path, with both lines); nesting deeper than
    :data:`MAX_DEPTH`. Uses libyaml's loader when PyYAML has it (about ten times faster
    on a list of millions of choices). ``lines``, if given, receives the line of every
    mapping key by its dotted path (``space.lr.low``).
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(loader, node, name, lines)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        if "nesting depth" in str(exc):
            raise ConfigError(name, f"is nested deeper than {MAX_DEPTH} levels of mappings "
                              f"and lists (at {_yaml_problem(exc).split(':')[0]})") from None
        raise ConfigError(name, f"malformed YAML at {_yaml_problem(exc)}") from None
    except RecursionError:  # PyYAML's pure-Python composer recurses per level
        raise ConfigError(name, f"is nested deeper than {MAX_DEPTH} levels of mappings "
                          "and lists") from None
    finally:
        loader.dispose()


def _check_nodes(loader: Any, root: Any, name: str,
                 lines: dict[str, int] | None = None) -> None:
    """Refuse duplicate mapping keys and deep nesting in a composed YAML document;
    record each key's line by its dotted path in ``lines``, if given.

    Walks the node graph iteratively, each node once (aliases are not re-walked).
    """
    import yaml

    seen_nodes: set[int] = set()
    stack: list[tuple[Any, str, int]] = [(root, "", 1)]
    while stack:
        node, path, depth = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if depth > MAX_DEPTH:
            raise ConfigError(path or name, f"is nested deeper than {MAX_DEPTH} levels of "
                              f"mappings and lists (line {node.start_mark.line + 1})")
        if isinstance(node, yaml.SequenceNode):
            scalar = yaml.ScalarNode
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(node.value)
                         if type(item) is not scalar)
            continue
        if not isinstance(node, yaml.MappingNode):
            continue
        first_line: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                stack.append((value_node, path, depth))
                continue
            key: Any = key_node.value
            if isinstance(key_node, yaml.ScalarNode):
                key = loader.construct_object(key_node)
            where = f"{path}.{key}" if path else str(key)
            line = key_node.start_mark.line + 1
            try:
                earlier = first_line.get(key)
                if earlier is None:
                    first_line[key] = line
            except TypeError:  # an unhashable key: construction refuses it
                earlier = None
            if earlier is not None:
                raise ConfigError(where, f"duplicate key at line {line} (first at line "
                                  f"{earlier}); YAML would silently keep only the later one")
            if lines is not None:
                lines.setdefault(where, line)
            if not isinstance(value_node, yaml.ScalarNode):
                stack.append((value_node, where, depth + 1))


def read_yaml(path: str | Path, lines: dict[str, int] | None = None) -> dict[str, Any]:
    """Read a ``space.yaml`` into a mapping (see :func:`parse_yaml` for what is refused
    and what ``lines`` receives)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("space.yaml", "file not found", str(path)) from None
    except OSError as exc:
        raise ConfigError("space.yaml", f"cannot read file ({exc.strerror})", str(path)) from None
    raw = parse_yaml(text, str(path), lines)
    if raw is None:
        raise ConfigError(str(path), "is empty")
    if not isinstance(raw, dict):
        raise ConfigError(str(path), "top level must be a mapping of keys", raw)
    return raw


def line_of(field: str, lines: Mapping[str, int]) -> int | None:
    """The line of ``field`` (a dotted path, maybe with ``[i]`` indices) in the file
    ``lines`` was read from: its own key's, else its nearest written parent's (a missing
    ``objective.metric`` is reported at ``objective``); None if no part of it is there."""
    path = field
    while path:
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return None


def _overridden(field: str, overrides: Mapping[str, Any] | list[str] | None) -> bool:
    """Whether an override set ``field``, a part of it, or something inside it."""
    if not overrides:
        return False
    keys = ([o.partition("=")[0].strip() for o in overrides] if isinstance(overrides, list)
            else list(overrides))
    return any(field == k or field.startswith((k + ".", k + "[")) or k.startswith(field + ".")
               for k in keys)


@contextmanager
def located(source: Any, lines: Mapping[str, int],
            overrides: Mapping[str, Any] | list[str] | None = None) -> Iterator[None]:
    """Add ``path:line`` to a :class:`ConfigError` raised inside, when its field is
    written in the file ``source`` (``lines`` from :func:`read_yaml`) and no override
    set it (then the file's line would point at a value that is not the one refused)."""
    try:
        yield
    except ConfigError as exc:
        line = line_of(exc.field, lines) if isinstance(source, (str, Path)) else None
        if line is not None and exc.where is None and not _overridden(exc.field, overrides):
            exc.where = f"{source}:{line}"
        raise
