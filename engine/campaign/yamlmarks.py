"""YAML that remembers where every key and value came from, and problems reported there.

PyYAML's `safe_load` throws positions away and silently lets a repeated key overwrite the
first one. Campaign diagnostics need both: every problem is reported as `file:line:col`, and a
duplicated key is a mistake worth reporting. So we compose the node tree ourselves and build the
plain Python data from it, recording marks by key path on the way. The second half turns YAML
errors and pydantic `ValidationError.errors()` entries into plain messages at those marks.
"""

import bisect
import difflib
import math
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent, Event
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

# A path into the data: mapping keys and list indices, the same shape as pydantic's `loc`.
KeyPath = tuple[Hashable, ...]

_MERGE_TAG = "tag:yaml.org,2002:merge"

# Limits a campaign is far inside and a hostile or broken file is not: nesting past MAX_DEPTH
# would exhaust Python's stack, and aliases are how a small file expands into gigabytes
# ("billion laughs"). A campaign uses an alias or a `<<` merge for a shared block at most.
MAX_DEPTH = 32
MAX_ALIASES = 100
MAX_EXPANDED = 10_000  # values repeated by aliases, over the whole document


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

    def source(self, path: KeyPath) -> KeyPath:
        """Where a path of the data was written (the data is the file's own: where it is)."""
        return path

    def has_key(self, path: KeyPath) -> bool:
        """Whether the file wrote the key at ``path``."""
        return self.source(path) in self.keys


class Refused(yaml.YAMLError):
    """Text ruler will not load although it may be YAML: past a limit, or a value it cannot hold."""

    def __init__(self, mark: Mark, message: str) -> None:
        super().__init__(message)
        self.mark = mark
        self.message = message


def load_marked(text: str) -> MarkedDoc:
    """Parse one YAML document. Raises yaml.YAMLError (MarkedYAMLError or Refused) on bad YAML."""
    lines = _Lines(text)
    try:
        loader = _Loader(text, lines)
    except ReaderError as exc:  # a character YAML forbids; the reader checks the text up front
        raise Refused(lines.at(exc.position),
                      f"character #x{exc.character:04x} is not allowed in YAML ({exc.reason})") from None
    try:
        root = loader.get_single_node()
        doc = MarkedDoc(data=None)
        if root is not None:
            doc.data = _Builder(loader, doc).build(root, ())
        return doc
    except yaml.MarkedYAMLError as exc:
        for mark in (exc.problem_mark, exc.context_mark):
            if mark is not None:
                at = lines.at(mark.index)
                mark.line, mark.column = at.line - 1, at.col - 1
        raise
    finally:
        loader.dispose()


class _Lines:
    """Line and column as an editor counts them: YAML also breaks lines at U+0085, U+2028 and
    U+2029, which would put a problem on a line no editor shows."""

    def __init__(self, text: str) -> None:
        self._starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def at(self, index: int) -> Mark:
        line = bisect.bisect_right(self._starts, index)
        return Mark(line, index - self._starts[line - 1] + 1)

    def of(self, node: Node | Event) -> Mark:
        return self.at(node.start_mark.index)  # type: ignore[union-attr]  # composed: always marked


class _Loader(yaml.SafeLoader):
    """Composes with the depth and alias limits checked as it goes, before Python's stack is."""

    def __init__(self, text: str, lines: _Lines) -> None:
        super().__init__(text)
        self.lines = lines
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in types-PyYAML
        if isinstance(event, AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise Refused(self.lines.of(event), f"more than {MAX_ALIASES} aliases; a campaign needs "
                                            "a few at most (write the values out)")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise Refused(self.lines.of(event), f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _Builder:
    """Turns composed nodes into dicts/lists/scalars, filling the doc's position maps."""

    def __init__(self, loader: _Loader, doc: MarkedDoc) -> None:
        self._loader = loader
        self._doc = doc
        self._active: set[int] = set()  # node ids on the current path, to stop alias cycles
        self._built: set[int] = set()  # node ids built once: building one again repeats it
        self._expanded = 0

    def build(self, node: Node, path: KeyPath) -> Any:
        self._doc.values[path] = self._at(node)
        self._count(node, path)
        if isinstance(node, ScalarNode):
            return self._scalar(node)
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

    def _at(self, node: Node) -> Mark:
        return self._loader.lines.of(node)

    def _count(self, node: Node, path: KeyPath) -> None:
        # Aliases nest: one within the depth limit can still build a value far deeper.
        if len(path) > MAX_DEPTH:
            raise Refused(self._at(node), f"nested more than {MAX_DEPTH} levels deep (through aliases)")
        if id(node) in self._built:
            self._expanded += 1
            if self._expanded > MAX_EXPANDED:
                raise Refused(self._at(node), f"aliases repeat more than {MAX_EXPANDED} values; "
                                           "a campaign needs a few (write the values out)")
        self._built.add(id(node))

    def _scalar(self, node: ScalarNode) -> Any:
        try:
            return self._loader.construct_object(node)
        except ValueError as exc:  # e.g. an integer of 5000 digits, or 2024-02-30
            reason = str(exc).split(";")[0]  # drop Python's advice on raising its own limit
            raise Refused(self._at(node), f"cannot read value {node.value[:40]!r} ({reason})") from None
        except (TypeError, KeyError, IndexError, AttributeError):  # PyYAML on `!!int ''`, `!!bool x`
            tag = node.tag.rsplit(":", 1)[-1]
            raise Refused(self._at(node), f"cannot read value {node.value[:40]!r} as !!{tag}") from None

    def _mapping(self, node: MappingNode, path: KeyPath) -> dict[Hashable, Any]:
        # Duplicates are looked for among the mapping's own keys, before '<<' merges are
        # flattened in: a key overriding a merged one is intended, not a duplicate.
        self._find_duplicates(node, path)
        self._loader.flatten_mapping(node)
        out: dict[Hashable, Any] = {}
        for key_node, value_node in node.value:
            key = self._key(key_node)
            self._doc.keys[(*path, key)] = self._at(key_node)
            out[key] = self.build(value_node, (*path, key))
        return out

    def _find_duplicates(self, node: MappingNode, path: KeyPath) -> None:
        seen: dict[Hashable, Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key, mark = self._key(key_node), self._at(key_node)
            if key in seen:
                self._doc.duplicates.append(Duplicate((*path, key), mark, seen[key]))
            else:
                seen[key] = mark

    def _key(self, node: Node) -> Hashable:
        if not isinstance(node, ScalarNode):
            message = "mapping keys must be plain scalars"
            raise ConstructorError(None, None, message, node.start_mark)
        key: Hashable = self._scalar(node)
        return key


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
    if isinstance(exc, Refused):
        return Problem(file, exc.mark.line, exc.mark.col, exc.message)
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
        return repr(value) if len(value) <= 80 else f"{value[:80]!r}..."
    if isinstance(value, int) and value.bit_length() > 128:  # str() refuses past 4300 digits
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else ("-.inf" if value < 0 else ".inf")  # YAML's spelling
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
    if loc and loc[-1] == "[key]":  # a bad mapping key: point at the key
        shown = describe(loc[-2])
        problem = "must be a string" if kind == "string_type" else _detail(err)
        return loc[:-1], True, f"{dotted(loc[:-2])}: key {shown} {problem.removesuffix(f', got {shown}')}"
    if kind == "extra_forbidden":
        parent, key = loc[:-1], loc[-1]
        where = f"in {dotted(parent)}" if parent else "at top level"
        return loc, True, f"unknown key {key!r} {where}" + suggest(key, _fields_at(root, parent))
    if kind == "missing":
        where = f" in {dotted(loc[:-1])}" if len(loc) > 1 else ""
        return loc, True, f"missing required key {loc[-1]!r}{where}"
    return loc, False, f"{dotted(loc)}: {_detail(err)}"


# A number in exponent form as Python reads it; YAML 1.1 (PyYAML) reads it as a float only with a
# dot in the number and a sign in the exponent (1.0e+9), so `1e9` and `1.0e9` are strings.
_EXPONENT_FORM = re.compile(r"([-+]?)([0-9][0-9_]*)?(?:\.([0-9_]*))?([eE])([-+]?)([0-9]+)")


def string_number(text: str, expected: str) -> str:
    """Why a string that reads as a number is one, and how to write the number: '' for other text."""
    m = _EXPONENT_FORM.fullmatch(text)
    if m is None or not (m[2] or m[3]):
        return ""
    sign, whole, frac, e, exp_sign, exp = m.groups()
    if expected == "an integer":
        value = Decimal(text.replace("_", ""))
        if value != value.to_integral_value() or abs(value.adjusted()) > 30:
            return ""
        spelled = str(int(value))
    else:
        spelled = f"{sign}{whole or '0'}.{frac or '0'}{e}{exp_sign or '+'}{exp}"
        if not isinstance(yaml.safe_load(spelled), float):
            return ""
        spelled += ", a dot in the number and a sign in the exponent"
    return f" (YAML reads {text} as a string: write {spelled})"


def _detail(err: Mapping[str, Any]) -> str:
    kind, ctx, got = err["type"], err.get("ctx") or {}, describe(err.get("input"))
    if kind in _EXPECTED:
        expected, value = _EXPECTED[kind], err.get("input")
        hint = (string_number(value, expected)
                if isinstance(value, str) and expected in ("a number", "an integer") else "")
        return f"expected {expected}, got {got}{hint}"
    if kind == "literal_error":
        options = re.findall(r"'([^']*)'", ctx["expected"])
        return f"expected one of {ctx['expected']}, got {got}" + suggest(err["input"], options)
    if kind in _BOUNDS:
        word, key = _BOUNDS[kind]
        return f"must be {word} {ctx[key]}, got {got}"
    if kind == "finite_number":
        return f"must be a finite number, got {got}"
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
