"""Whether an event fits its kind's fields (engine.record.events.FIELDS): :func:`check` before the
runner writes one (a ruler bug fails loudly, never as a malformed journal), :func:`mistyped` as a
journal's reader takes one (a field of another type is said, not folded).
"""

# No ``from __future__ import annotations``: the checks read the TypedDicts' evaluated annotations.

import functools
import keyword
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, is_typeddict

import msgspec

from engine.errors import EngineError
from engine.record.events import FIELDS, OPEN, EventKind


class MalformedEvent(EngineError):
    """Ruler tried to journal an event its kind does not define: a bug in ruler, never input."""


def check(kind: str, data: Mapping[str, Any]) -> EventKind:
    """The kind, when ``data`` has every required field of it and no field it does not define."""
    try:
        known = EventKind(kind)
    except ValueError:
        raise MalformedEvent(f"unknown event kind {kind!r}") from None
    spec = FIELDS[known]
    required = spec.__required_keys__  # type: ignore[attr-defined]  # a TypedDict class has them
    missing = required - data.keys()
    defined = required | spec.__optional_keys__  # type: ignore[attr-defined]  # a TypedDict class has them
    extra = set() if known in OPEN else data.keys() - defined
    if missing or extra:
        raise MalformedEvent(f"{known} event: " + "; ".join(
            ([f"missing {', '.join(sorted(missing))}"] if missing else [])
            + ([f"undefined {', '.join(sorted(extra))}"] if extra else [])))
    return known


# ---------------------------------------------------------------- reading: fields of the right type

Fits = Callable[[Any], bool]
_SCALARS: dict[Any, frozenset[type]] = {
    bool: frozenset({bool}), int: frozenset({int}), float: frozenset({float, int}),
    type(None): frozenset({type(None)}), str: frozenset({str})}


def _types(tp: Any) -> frozenset[type] | None:
    """The Python types of the JSON values a field of type ``tp`` takes, when its type alone
    tells (a float field takes an integer, never a bool; a StrEnum field any string, so an older
    journal's word still reads); None when the value must be looked into (a list of numbers)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in _SCALARS:
        return _SCALARS[tp]
    if isinstance(tp, type) and issubclass(tp, str):
        return _SCALARS[str]
    if origin is list and args[0] is Any:
        return frozenset({list, tuple})  # a tuple: an event not yet written (the runner's own)
    if origin is dict and args[1] is Any:
        return frozenset({dict})
    if origin in (typing.Union, types.UnionType):
        each = [_types(a) for a in args]
        return None if None in each else frozenset().union(*each)  # type: ignore[arg-type]
    return None


def _subtype(v: Any, allowed: frozenset[type]) -> bool:
    """A value of a subclass of an allowed type: a StrEnum word or a numpy float in an event the
    runner folds before it is written; never a bool where a number goes."""
    return not isinstance(v, bool) and isinstance(v, tuple(allowed))


def _fits(tp: Any) -> Fits:
    """Whether a JSON value is of the annotated type, looked into."""
    simple = _types(tp)
    if simple is not None:
        return lambda v: type(v) in simple or _subtype(v, simple)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return lambda v: True
    if is_typeddict(tp):
        inner = Fields(tp)
        return lambda v: isinstance(v, dict) and inner.why_not(v) is None
    if origin in (typing.Union, types.UnionType):
        alts = [_fits(a) for a in args]
        return lambda v: any(f(v) for f in alts)
    if origin is list:
        item = _fits(args[0])
        return lambda v: isinstance(v, list | tuple) and all(map(item, v))
    if origin is dict:
        value = _fits(args[1])
        return lambda v: isinstance(v, dict) and all(map(value, v.values()))
    raise TypeError(f"no JSON check for {tp!r}")


def _noun(tp: Any, many: bool = False) -> str:
    """The type as a journal's reader says it: ``a number or null``, ``a list of strings``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_noun(a, many) for a in args)
    if origin is list:
        word = "lists" if many else "a list"
        return word + ("" if args[0] is Any else f" of {_noun(args[0], True)}")
    if origin is dict:
        word = "objects" if many else "an object"
        return word + ("" if args[1] is Any else f" of {_noun(args[1], True)}")
    if is_typeddict(tp):
        return "objects" if many else "an object"
    one, more = {bool: ("a boolean", "booleans"), int: ("an integer", "integers"),
                 float: ("a number", "numbers"), type(None): ("null", "nulls")}.get(
        tp, ("a string", "strings") if isinstance(tp, type) and issubclass(tp, str)
        else ("any value", "values"))
    return more if many else one


def _json_noun(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    return "a list" if isinstance(v, list) else "an object"


class Fields:
    """The fields of one TypedDict as a journal's reader checks them (:meth:`why_not`). Only the
    fields an event has are looked at, most by their type alone: the check runs on every event
    of a full fold (a tenth of a day-long journal's fold time)."""

    def __init__(self, spec: type, envelope: bool = False) -> None:
        hints = typing.get_type_hints(spec) | ({"ts": float} if envelope else {})
        self.types = {n: t for n, tp in hints.items() if (t := _types(tp)) is not None}
        self.deep = {n: _fits(tp) for n, tp in hints.items() if n not in self.types and tp is not Any}
        self.nested = {n: Fields(tp) for n, tp in hints.items() if is_typeddict(tp)}
        self.nouns = {n: _noun(tp) for n, tp in hints.items()}

        # One pass over the checked fields (not over the event's): each with a value of a type it
        # takes, which stands in for it when the event lacks it (one test a field, not two).
        self._plain = tuple((n, _EXAMPLES[min(t, key=str)], t) for n, t in self.types.items())
        self._deep = tuple(self.deep.items())

    def why_not(self, e: Mapping[str, Any], prefix: str = "") -> str | None:
        get = e.get
        for name, absent, allowed in self._plain:
            if type(get(name, absent)) not in allowed and not _subtype(v := e[name], allowed):
                return self._said(name, v, prefix)
        for name, fit in self._deep:
            v = get(name, _ABSENT)
            if v is not _ABSENT and not fit(v):
                return self._said(name, v, prefix)
        return None

    def _said(self, name: str, v: Any, prefix: str) -> str:
        inner = self.nested.get(name)
        if inner is not None and type(v) is dict:
            return inner.why_not(v, f"{prefix}{name}.") or ""
        return f"'{prefix}{name}' is {_json_noun(v)}, not {self.nouns[name]}"


_ABSENT = object()
# A value of each type a field's value may be of (the types _types gives): never changed.
_EXAMPLES: dict[type, Any] = {bool: False, int: 0, float: 0.0, type(None): None, str: "", list: [],
                              tuple: (), dict: {}}
@functools.cache
def checked(kind: str) -> Fields | None:
    """The check of a kind's fields, None for a kind this version does not know (a str, which each
    EventKind is: a journal's kind is looked up before it is known to be one). Each is made when
    first asked: a journal read without damage asks it of one kind, run_started, and the others
    (a third of this module's import) are never made."""
    spec = FIELDS.get(kind)  # type: ignore[call-overload]  # any str: a kind this version may not know
    return None if spec is None else Fields(spec, envelope=True)


def mistyped(e: Mapping[str, Any]) -> str | None:
    """Why an event read from a journal holds a field its kind defines with a value of another
    type (``'rate' is a string, not a number``), or None. A kind this version does not know is
    not checked: a newer engine's events are on record only."""
    fields = checked(e.get("kind", ""))
    return None if fields is None else fields.why_not(e)


# ---------------------------------------------------------------- reading: the same checks, in C
#
# A full fold checks a hundred thousand events: each kind's fields as a msgspec Struct made from
# its TypedDict (no second schema), decoded and checked in C as the line is parsed. A Struct takes
# only what :class:`Fields` takes, decoded as the standard parser decodes it (an integer in a
# float field stays an integer, a wide one exact), and no field its kind does not define (but for
# an open kind): whatever it refuses is read and checked as above, which says what is wrong.


def _typed(tp: Any) -> Any:
    """The msgspec type of the JSON values ``_fits(tp)`` takes; TypeError for one it cannot say
    (a nested TypedDict: Fields checks its fields only where they are present)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp in (bool, int, str, type(None)):
        return tp
    if tp is float:
        return int | float
    if isinstance(tp, type) and issubclass(tp, str):
        return str  # a StrEnum field takes any word: an older journal's still reads
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_typed(a) for a in args)]  # noqa: UP007  # a union built at run time
    if origin is list:
        return list[_typed(args[0])]  # type: ignore[misc]  # a type built at run time
    if origin is dict and args[0] is str:
        return dict[str, _typed(args[1])]  # type: ignore[misc]  # a type built at run time
    raise TypeError(f"no msgspec type for {tp!r}")


def _struct(kind: str, spec: type) -> tuple[type[msgspec.Struct], bool]:
    """The Struct of one kind, tagged by ``kind``, and whether it checks every field (else it
    checks only the envelope: the event is read and checked as :class:`Fields` does)."""
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [("seq", int)]
    try:
        # Every field may be absent, as Fields takes it (a handler says one it needs is not there).
        fields += [(name, _typed(tp) | msgspec.UnsetType, msgspec.UNSET)
                   for name, tp in (typing.get_type_hints(spec) | {"ts": float}).items()]
        strict = True
    except TypeError:
        fields, strict = [("seq", int)], False
    # A field named like a keyword ("class"): its attribute is renamed, its JSON name kept.
    rename = {f"{name}_": name for name, *_ in fields if keyword.iskeyword(name)}
    fields = [(f"{f[0]}_", *f[1:]) if keyword.iskeyword(f[0]) else f for f in fields]
    cls = msgspec.defstruct(f"Typed_{kind}", fields, tag_field="kind", tag=str(kind), kw_only=True,
                            rename=rename or None, gc=False,
                            forbid_unknown_fields=strict and kind not in OPEN)
    return cls, strict


TYPED: dict[type[msgspec.Struct], tuple[str, bool]] = {
    cls: (str(kind), strict) for kind, spec in FIELDS.items() for cls, strict in [_struct(kind, spec)]}
# The event on one line, as a Struct of its kind, checked; msgspec.DecodeError when it is not one
# (not JSON, a kind this version does not know, a field of another type, absent or undefined).
decode_typed = msgspec.json.Decoder(typing.Union[tuple(TYPED)]).decode  # noqa: UP007
to_event = msgspec.to_builtins  # its fields as the event's dict (the absent ones left out)


def _object(tp: Any) -> bool:
    """Whether a field of type ``tp`` may hold an object (``dict[str, Any] | None``)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(map(_object, typing.get_args(tp)))
    return typing.get_origin(tp) is dict


def _carries_objects(spec: type) -> bool:
    """Whether every event of the kind carries an object (a window_ready's boot facts)."""
    hints = typing.get_type_hints(spec)
    required = spec.__required_keys__  # type: ignore[attr-defined]  # a TypedDict class has them
    return any(_object(hints[name]) for name in required)


def _shallow(cls: type[msgspec.Struct]) -> Callable[[Any], dict[str, Any]]:
    """:data:`to_event` but for the values, which are the Struct's own (a decoded line holds only
    JSON's values, which to_builtins would copy: a window_ready's hundred boot facts)."""
    tag, kind = cls.__struct_config__.tag_field, cls.__struct_config__.tag
    names, unset, values = cls.__struct_encode_fields__, msgspec.UNSET, msgspec.structs.astuple

    def event(t: Any) -> dict[str, Any]:
        out: dict[str, Any] = {tag: kind}  # type: ignore[dict-item]  # a tagged Struct has both
        for name, v in zip(names, values(t), strict=True):
            if v is not unset:
                out[name] = v
        return out

    return event


# Each Struct's event as a dict: copied by to_builtins in C, but where each event carries an object.
EVENT_OF: dict[type[msgspec.Struct], Callable[[Any], dict[str, Any]]] = {
    cls: _shallow(cls) if strict and _carries_objects(FIELDS[EventKind(kind)]) else to_event
    for cls, (kind, strict) in TYPED.items()}
