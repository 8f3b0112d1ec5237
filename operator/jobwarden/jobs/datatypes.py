"""Typed job data: checked at enqueue, handed to ``perform`` as the declared type.

Why at enqueue: data that does not fit the job fails on every attempt, so the
only useful moment to refuse it is before it is stored -- with a typed error
(:class:`jobwarden.InvalidJobData`) naming the field, and nothing written.

A job declares its data type with ``data_type = Invoice`` or by annotating
``perform(self, data: Invoice)``. Supported: dataclasses, ``TypedDict``s and
pydantic models (when pydantic is installed; it is never imported otherwise),
whose fields may be JSON types (``str``, ``int``, ``float``, ``bool``, ``None``),
``list[...]``, ``dict[str, ...]``, ``Literal``, unions/``Optional`` and nested
supported types. The stored form is always plain JSON. Function jobs
(``@jobwarden.job``) have their arguments bound to the signature and checked
against the parameters' annotations the same way.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args, get_origin

from jobwarden import errors

_UNCHECKED = {Any, object, inspect.Parameter.empty}
#: (annotation, exact type of the value) pairs that fit at once: the common scalars,
#: checked before the general walk (bool is not an int here, as below).
_PLAIN_FITS = {(int, int), (float, float), (float, int), (str, str), (bool, bool)}


def is_structured(tp: Any) -> bool:
    """A type whose instances are job data records (dataclass, TypedDict, pydantic)."""
    return isinstance(tp, type) and (dataclasses.is_dataclass(tp) or typing.is_typeddict(tp)
                                     or _is_pydantic(tp))


def _is_pydantic(tp: Any) -> bool:
    pydantic = sys.modules.get("pydantic")  # installed and imported by the application
    return pydantic is not None and isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def _hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj)
    except Exception as exc:  # an annotation that does not resolve
        raise errors.InvalidJobData(f"cannot resolve the type hints of {obj!r}: {exc}") from exc


def declared_type(perform: Callable[..., Any], explicit: Any) -> Any | None:
    """The data type of a job: ``data_type`` if set, else ``perform``'s annotation."""
    if explicit is not None:
        if not is_structured(explicit):
            raise errors.InvalidJobData(
                f"data_type must be a dataclass, a TypedDict or a pydantic model, "
                f"not {explicit!r}")
        return explicit
    params = [p for p in inspect.signature(perform).parameters.values() if p.name != "self"]
    if not params or params[0].annotation is inspect.Parameter.empty:
        return None
    hint = _hints(perform).get(params[0].name)
    return hint if is_structured(hint) else None


# -- encode (enqueue) and decode (perform) ------------------------------------------


def encode(tp: Any, value: Any) -> Any:
    """``value`` (an instance of ``tp`` or its JSON form) checked and as stored JSON."""
    if _is_pydantic(tp):
        if isinstance(value, tp):
            return value.model_dump(mode="json")
        pydantic = sys.modules["pydantic"]
        try:
            return tp.model_validate(value).model_dump(mode="json")
        except pydantic.ValidationError as exc:
            raise errors.InvalidJobData(f"data does not fit {tp.__name__}: {exc}") from exc
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and isinstance(value, tp):
        value = _as_json(value)
    check(tp, value)
    return value


def _as_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _as_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if _is_pydantic(type(value)):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [_as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    return value


def decode(tp: Any, data: Any) -> Any:
    """Stored JSON as an instance of ``tp`` (the reverse of :func:`encode`)."""
    origin = get_origin(tp)
    if _is_pydantic(tp):
        return tp.model_validate(data)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type) and isinstance(data, Mapping):
        hints = _hints(tp)
        return tp(**{k: decode(hints.get(k, Any), v) for k, v in data.items()})
    if typing.is_typeddict(tp) and isinstance(data, Mapping):
        hints = _hints(tp)
        return {k: decode(hints.get(k, Any), v) for k, v in data.items()}
    if origin in (list, tuple) and isinstance(data, list):
        args = get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            return tuple(decode(a, v) for a, v in zip(args, data, strict=False))
        return origin(decode(args[0] if args else Any, v) for v in data)
    if origin is dict and isinstance(data, Mapping):
        args = get_args(tp)
        return {k: decode(args[1] if args else Any, v) for k, v in data.items()}
    if origin in (typing.Union, types.UnionType):
        for arg in get_args(tp):
            if _fits(arg, data):
                return decode(arg, data)
    return data


# -- checking ---------------------------------------------------------------------


def _fits(tp: Any, value: Any) -> bool:
    try:
        check(tp, value)
    except errors.InvalidJobData:
        return False
    return True


def check(tp: Any, value: Any, where: str = "data") -> None:
    """Raise InvalidJobData naming the first place where ``value`` does not fit ``tp``."""
    if tp in _UNCHECKED or (tp, type(value)) in _PLAIN_FITS:
        return
    if tp is None or tp is type(None):
        if value is not None:
            raise _mismatch(where, "null", value)
        return
    origin = get_origin(tp)
    if origin is Literal:
        if value not in get_args(tp):
            raise errors.InvalidJobData(
                f"{where} must be one of {list(get_args(tp))!r}, not {value!r}")
        return
    if origin in (typing.Union, types.UnionType):
        if not any(_fits(arg, value) for arg in get_args(tp)):
            raise _mismatch(where, " or ".join(_name(a) for a in get_args(tp)), value)
        return
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise _mismatch(where, "a list", value)
        args = get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise errors.InvalidJobData(f"{where} must have {len(args)} items")
            for index, (arg, item) in enumerate(zip(args, value, strict=True)):
                check(arg, item, f"{where}[{index}]")
            return
        for index, item in enumerate(value):
            check(args[0] if args else Any, item, f"{where}[{index}]")
        return
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise _mismatch(where, "an object", value)
        args = get_args(tp)
        for key, item in value.items():
            if not isinstance(key, str):
                raise errors.InvalidJobData(f"{where} keys must be strings, not {key!r}")
            check(args[1] if args else Any, item, f"{where}.{key}")
        return
    if _is_pydantic(tp):
        encode(tp, value)
        return
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        _check_record(tp, value, where, required={
            f.name for f in dataclasses.fields(tp)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING},
            fields={f.name for f in dataclasses.fields(tp) if f.init})
        return
    if typing.is_typeddict(tp):
        _check_record(tp, value, where, required=set(tp.__required_keys__),
                      fields=set(_hints(tp)))
        return
    if tp is bool:
        if not isinstance(value, bool):
            raise _mismatch(where, "a boolean", value)
        return
    if tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise _mismatch(where, "an integer", value)
        return
    if tp is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _mismatch(where, "a number", value)
        return
    if tp is str:
        if not isinstance(value, str):
            raise _mismatch(where, "a string", value)
        return
    raise errors.InvalidJobData(
        f"{where}: {_name(tp)} cannot be job data (JSON types, lists, string-keyed dicts, "
        "dataclasses, TypedDicts and pydantic models can)")


def _check_record(tp: Any, value: Any, where: str, *, required: set[str],
                  fields: set[str]) -> None:
    if not isinstance(value, Mapping):
        raise _mismatch(where, f"an object ({tp.__name__})", value)
    missing = sorted(required - set(value))
    if missing:
        raise errors.InvalidJobData(f"{where} ({tp.__name__}) is missing {', '.join(missing)}")
    unknown = sorted(set(value) - fields)
    if unknown:
        raise errors.InvalidJobData(
            f"{where} ({tp.__name__}) has unknown field(s) {', '.join(map(str, unknown))}")
    hints = _hints(tp)
    for key, item in value.items():
        check(hints.get(key, Any), item, f"{where}.{key}")


def _mismatch(where: str, wanted: str, value: Any) -> errors.InvalidJobData:
    return errors.InvalidJobData(f"{where} must be {wanted}, not {type(value).__name__} "
                                 f"{_short(value)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or repr(tp)


# -- function jobs ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _CallShape:
    """What checking a function job's data needs of its signature, computed once.

    ``inspect.signature``, ``get_type_hints`` and ``Signature.bind`` cost tens of
    microseconds each, which made them most of a 1,000-job ``enqueue_many``. A
    function's signature and annotations do not change after definition; one
    whose annotations do not resolve is not cached (it raises on every call).
    """

    signature: inspect.Signature
    hints: dict[str, Any]
    #: Only plain named parameters (no ``*args``/``**kwargs``/positional-only): a
    #: dict of data binds when its keys are names and cover the required ones.
    plain: bool
    names: frozenset[str]
    required: frozenset[str]


_CALL_SHAPES: dict[Callable[..., Any], _CallShape] = {}


def _call_shape(function: Callable[..., Any]) -> _CallShape:
    shape = _CALL_SHAPES.get(function)
    if shape is None:
        signature = inspect.signature(function)
        params = signature.parameters.values()
        shape = _CALL_SHAPES[function] = _CallShape(
            signature=signature, hints=_hints(function),
            plain=all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params),
            names=frozenset(p.name for p in params),
            required=frozenset(p.name for p in params if p.default is p.empty))
    return shape


def check_call(function: Callable[..., Any], data: Any) -> None:
    """The data of a function job binds to its signature, each argument of the
    annotated type; raises InvalidJobData (nothing is stored)."""
    shape = _call_shape(function)
    if (isinstance(data, dict) and shape.plain and shape.required <= data.keys()
            and data.keys() <= shape.names):
        # What Signature.bind would conclude, without building a BoundArguments.
        for param_name, value in data.items():
            check(shape.hints.get(param_name, Any), value, param_name)
        return
    name = getattr(function, "__qualname__", repr(function))
    signature, hints = shape.signature, shape.hints
    try:
        if data is None:
            bound = signature.bind()
        elif isinstance(data, dict):
            bound = signature.bind(**data)
        elif isinstance(data, list):
            bound = signature.bind(*data)
        else:
            raise errors.InvalidJobData(
                f"a function job takes an object (keyword arguments), a list or null as "
                f"data, not {type(data).__name__}")
    except TypeError as exc:
        raise errors.InvalidJobData(f"data does not fit {name}{signature}: {exc}") from exc
    for param_name, value in bound.arguments.items():
        param = signature.parameters[param_name]
        hint = hints.get(param_name, Any)
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            for index, item in enumerate(value):
                check(hint, item, f"{param_name}[{index}]")
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            for key, item in value.items():
                check(hint, item, key)
        else:
            check(hint, value, param_name)


def decode_call(function: Callable[..., Any],
                data: Any) -> tuple[list[Any], dict[str, Any]]:
    """Arguments for ``function`` from stored data, structured ones decoded."""
    if not data:  # null, {} or []: no arguments
        return [], {}
    shape = _call_shape(function)
    hints = shape.hints
    if isinstance(data, dict):
        return [], {k: decode(hints.get(k, Any), v) for k, v in data.items()}
    names = list(shape.signature.parameters)
    return [decode(hints.get(names[i], Any) if i < len(names) else Any, v)
            for i, v in enumerate(data)], {}


def is_typeddict_type(tp: Any) -> bool:
    return typing.is_typeddict(tp)
