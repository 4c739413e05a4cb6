"""YAML that remembers where every key and value came from, and problems reported there.

PyYAML's `safe_load` throws positions away and silently lets a repeated key overwrite the
first one. Campaign diagnostics need both: every problem is reported as `file:line:col`, and a
duplicated key is a mistake worth reporting. So we compose the node tree ourselves and build the
plain Python data from it, recording marks by key path on the way. The second half turns YAML
errors and pydantic `ValidationError.errors()` entries into plain messages at those marks.
"""

import difflib
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

# A path into the data: mapping keys and list indices, the same shape as pydantic's `loc`.
KeyPath = tuple[Hashable, ...]

_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class Mark:
    """A 1-based position in the YAML text."""

    line: int
    col: int


@dataclass(frozen=True)
class Duplicate:
    """A mapping key that appears more than once in the same mapping."""

    path: KeyPath  # path of the key (its parent mapping's path plus the key)
    mark: Mark  # where the repeat is
    first: Mark  # where the key first appeared


@dataclass
class MarkedDoc:
    """The loaded data plus the position of each mapping key and each value node."""

    data: Any
    keys: dict[KeyPath, Mark] = field(default_factory=dict)
    values: dict[KeyPath, Mark] = field(default_factory=dict)
    duplicates: list[Duplicate] = field(default_factory=list)

    def locate(self, path: KeyPath, *, key: bool = False) -> Mark:
        """Position of `path`'s key (key=True) or value; else the nearest known ancestor.

        For ancestors the key is preferred: a missing `workload.reps` is best shown on the
        `workload:` line, not on the first line of its block.
        """
        exact = self.keys if key else self.values
        if path in exact:
            return exact[path]
        for end in range(len(path) - 1, -1, -1):
            parent = path[:end]
            found = self.keys.get(parent) or self.values.get(parent)
            if found is not None:
                return found
        return Mark(1, 1)


def load_marked(text: str) -> MarkedDoc:
    """Parse one YAML document. Raises yaml.YAMLError (usually MarkedYAMLError) on bad YAML."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        doc = MarkedDoc(data=None)
        if root is not None:
            doc.data = _Builder(loader, doc).build(root, ())
        return doc
    finally:
        loader.dispose()


def _mark(node: Node) -> Mark:
    return Mark(node.start_mark.line + 1, node.start_mark.column + 1)


class _Builder:
    """Turns composed nodes into dicts/lists/scalars, filling the doc's position maps."""

    def __init__(self, loader: yaml.SafeLoader, doc: MarkedDoc) -> None:
        self._loader = loader
        self._doc = doc
        self._active: set[int] = set()  # node ids on the current path, to stop alias cycles

    def build(self, node: Node, path: KeyPath) -> Any:
        self._doc.values[path] = _mark(node)
        if isinstance(node, ScalarNode):
            return self._loader.construct_object(node)
        if id(node) in self._active:
            raise ConstructorError(None, None, "recursive alias", node.start_mark)
        self._active.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
            assert isinstance(node, MappingNode)
            return self._mapping(node, path)
        finally:
            self._active.discard(id(node))

    def _mapping(self, node: MappingNode, path: KeyPath) -> dict[Hashable, Any]:
        # Duplicates are looked for among the mapping's own keys, before '<<' merges are
        # flattened in: a key overriding a merged one is intended, not a duplicate.
        self._find_duplicates(node, path)
        self._loader.flatten_mapping(node)
        out: dict[Hashable, Any] = {}
        for key_node, value_node in node.value:
            key = self._key(key_node)
            self._doc.keys[(*path, key)] = _mark(key_node)
            out[key] = self.build(value_node, (*path, key))
        return out

    def _find_duplicates(self, node: MappingNode, path: KeyPath) -> None:
        seen: dict[Hashable, Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key, mark = self._key(key_node), _mark(key_node)
            if key in seen:
                self._doc.duplicates.append(Duplicate((*path, key), mark, seen[key]))
            else:
                seen[key] = mark

    def _key(self, node: Node) -> Hashable:
        if not isinstance(node, ScalarNode):
            message = "mapping keys must be plain scalars"
            raise ConstructorError(None, None, message, node.start_mark)
        return self._loader.construct_object(node)


# --- problems --------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Problem:
    file: str
    line: int  # 1-based
    col: int  # 1-based
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: {self.message}"


# A problem found against the data: its path, whether the key (not the value) is meant, message.
Issue = tuple[KeyPath, bool, str]


def place(file: str, doc: MarkedDoc, issue: Issue) -> Problem:
    path, on_key, message = issue
    mark = doc.locate(path, key=on_key)
    return Problem(file, mark.line, mark.col, message)


def duplicate_issues(doc: MarkedDoc) -> list[Issue]:
    return [
        (d.path, True, f"duplicate key {d.path[-1]!r} (first at line {d.first.line})")
        for d in doc.duplicates
    ]


def yaml_problem(file: str, exc: yaml.YAMLError) -> Problem:
    if not isinstance(exc, yaml.MarkedYAMLError):
        return Problem(file, 1, 1, f"YAML error: {exc}")
    mark = exc.problem_mark or exc.context_mark
    message = f"YAML syntax error: {exc.problem or exc.context}"
    if exc.context and exc.problem and exc.context_mark:
        context = exc.context_mark
        if exc.context == "while scanning a simple key":
            mark = context  # the key missing its ':' is the line to fix, not the one after it
        else:
            message += f" ({exc.context} at line {context.line + 1}, column {context.column + 1})"
    return Problem(file, mark.line + 1 if mark else 1, mark.column + 1 if mark else 1, message)


def describe(value: object) -> str:
    """How a value reads in a message: YAML spelling for scalars, a kind for containers."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | tuple):
        return "a list"
    return "a mapping" if isinstance(value, dict) else type(value).__name__


def dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "campaign"


def suggest(word: object, choices: list[str]) -> str:
    close = difflib.get_close_matches(str(word), choices, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


_EXPECTED = {
    **dict.fromkeys(("int_type", "int_parsing", "int_from_float"), "an integer"),
    **dict.fromkeys(("float_type", "float_parsing"), "a number"),
    **dict.fromkeys(("bool_type", "bool_parsing"), "true or false"),
    **dict.fromkeys(("tuple_type", "list_type", "iterable_type"), "a list"),
    **dict.fromkeys(("dict_type", "model_type", "model_attributes_type"), "a mapping"),
    "string_type": "a string",
}
_BOUNDS = {
    "greater_than_equal": ("at least", "ge"),
    "greater_than": ("greater than", "gt"),
    "less_than": ("less than", "lt"),
    "less_than_equal": ("at most", "le"),
}


def schema_issue(err: Mapping[str, Any], root: type[BaseModel]) -> Issue:
    """One pydantic error as a plain message; `root` is the validated model (for did-you-mean)."""
    loc: KeyPath = tuple(err["loc"])
    kind = err["type"]
    if loc and loc[-1] == "[key]":  # a mapping key of the wrong type: point at the key
        return loc[:-1], True, f"{dotted(loc[:-2])}: key {describe(loc[-2])} must be a string"
    if kind == "extra_forbidden":
        parent, key = loc[:-1], loc[-1]
        where = f"in {dotted(parent)}" if parent else "at top level"
        return loc, True, f"unknown key {key!r} {where}" + suggest(key, _fields_at(root, parent))
    if kind == "missing":
        where = f" in {dotted(loc[:-1])}" if len(loc) > 1 else ""
        return loc, True, f"missing required key {loc[-1]!r}{where}"
    return loc, False, f"{dotted(loc)}: {_detail(err)}"


def _detail(err: Mapping[str, Any]) -> str:
    kind, ctx, got = err["type"], err.get("ctx") or {}, describe(err.get("input"))
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {got}"
    if kind == "literal_error":
        options = re.findall(r"'([^']*)'", ctx["expected"])
        return f"expected one of {ctx['expected']}, got {got}" + suggest(err["input"], options)
    if kind in _BOUNDS:
        word, key = _BOUNDS[kind]
        return f"must be {word} {ctx[key]}, got {got}"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx['pattern'].strip('^$')}, got {got}"
    if kind == "too_short":
        return "must not be empty"
    return str(err["msg"])  # our own PydanticCustomError messages are already plain


def _fields_at(root: type[BaseModel], path: KeyPath) -> list[str]:
    """Field names of the model found at `path` under `root`, following tuples and dicts."""
    tp: Any = root
    for part in path:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            found = tp.model_fields.get(str(part))
            tp = found.annotation if found else None
        elif get_origin(tp) in (tuple, dict):
            tp = get_args(tp)[0 if get_origin(tp) is tuple else 1]
        else:
            return []
    tp = _unwrap(tp)
    return list(tp.model_fields) if isinstance(tp, type) and issubclass(tp, BaseModel) else []


def _unwrap(tp: Any) -> Any:
    """Strip Annotated[...] and `| None` down to the underlying type."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
        elif get_origin(tp) in (Union, UnionType):
            tp = next(arg for arg in get_args(tp) if arg is not type(None))
        else:
            return tp
