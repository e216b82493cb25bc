"""msgspec structs derived from pydantic models: one definition of a record (the model), read
fast (issue 24).

:func:`struct_of` builds, from a model's fields, a :class:`msgspec.Struct` with the same field
names, order, types and bounds (``ge``, ``le``, ``min_length``, ``max_length``; strict types and
finite numbers are msgspec's JSON behaviour), so a record type is never written twice; an
annotation or constraint without a msgspec equivalent stops the import instead of loosening the
struct.  :func:`model_builder` turns a decoded struct whose rules have all been checked into the model
itself without re-validation, so a reader returns the models that DESIGN section 3 names.
:mod:`probeguard_core.logs` derives the structs of its records here and applies their rules.
"""

from __future__ import annotations

import types
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import chain, islice, repeat, starmap
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import annotated_types
import msgspec
from pydantic import BaseModel, Strict
from pydantic.fields import FieldInfo

__all__ = ["StructRecord", "model_builder", "struct_of"]

_M = TypeVar("_M", bound=BaseModel)


class StructRecord(msgspec.Struct, gc=False):
    """Base of the derived structs (what the readers decode into before building the models)."""


def _meta(items: Iterable[Any]) -> list[Any]:
    """msgspec constraints for pydantic's field metadata (an unknown constraint stops the import)."""
    kw: dict[str, Any] = {}
    for m in items:
        if isinstance(m, FieldInfo):
            return _meta(m.metadata)
        if isinstance(m, annotated_types.Ge):
            kw["ge"] = m.ge
        elif isinstance(m, annotated_types.Le):
            kw["le"] = m.le
        elif isinstance(m, annotated_types.MinLen):
            kw["min_length"] = m.min_length
        elif isinstance(m, annotated_types.MaxLen):
            kw["max_length"] = m.max_length
        elif not (isinstance(m, Strict) or getattr(m, "allow_inf_nan", None) is False):
            # strict types and finite numbers are msgspec's JSON behaviour (and the re-encoding check)
            raise TypeError(f"no msgspec equivalent for the constraint {m!r}")
    return [msgspec.Meta(**kw)] if kw else []


def _struct_type(tp: Any, metadata: Iterable[Any], module: str) -> Any:
    """The msgspec type of a pydantic annotation (nested models become their derived structs)."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _struct_type(args[0], [*args[1:], *metadata], module)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        base = struct_of(tp, module)
    elif origin in (Union, types.UnionType):
        base = Union[tuple(_struct_type(a, (), module) for a in args)]  # noqa: UP007 (a runtime-built union)
    elif origin in (list, dict):
        base = origin[tuple(_struct_type(a, (), module) for a in args)]
    elif origin is Literal or tp in (str, int, float, bool, type(None)):
        base = tp
    else:
        raise TypeError(f"no msgspec equivalent for the type {tp!r}")
    meta = _meta(metadata)
    return Annotated[base, *meta] if meta else base


_STRUCTS: dict[type[BaseModel], type[StructRecord]] = {}  # model -> its derived struct


def struct_of(model: type[BaseModel], module: str, extra: Sequence[tuple[str, Any, Any]] = ()) -> type[StructRecord]:
    """The msgspec struct ``<Model>Struct`` with ``model``'s fields, in order, types and bounds
    (nested models become their own derived structs), plus the optional ``extra`` fields
    ``(name, type, default)`` last; a field at its default is left out of the encoding.  Its
    name must be bound in ``module`` (pickling finds it there).  Validators are not constraints
    here: whoever decodes into the struct applies the model's rules."""
    if model not in _STRUCTS:
        fields: list[Any] = []
        for name, info in model.model_fields.items():
            tp = _struct_type(info.annotation, info.metadata, module)
            fields.append((name, tp) if info.is_required() else (name, tp, info.default))
        _STRUCTS[model] = msgspec.defstruct(f"{model.__name__}Struct", [*fields, *extra], bases=(StructRecord,),
                                            module=module, gc=False, omit_defaults=True)
    return _STRUCTS[model]


def _nested_model(tp: Any) -> tuple[bool, type[BaseModel]] | None:
    """(is a list, model) when the annotation holds a model: ``M``, ``M | None`` or ``list[M]``."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _nested_model(args[0])
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return False, tp
    inner = [n for n in map(_nested_model, args) if n is not None]
    if not inner:
        return None
    if origin in (Union, types.UnionType) and len(inner) == 1 and not inner[0][0]:
        return inner[0]
    if origin is list and len(inner) == 1 and not inner[0][0]:
        return True, inner[0][1]
    raise TypeError(f"no model construction for the type {tp!r}")


_BASE_SLOTS = {k: BaseModel.__dict__[k].__set__ for k in
               ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")}


def model_builder(model: type[_M]) -> Callable[[list[Any]], list[_M]]:
    """A function turning structs of :func:`struct_of` (every rule already applied) into the models
    themselves, built without re-validation as :meth:`pydantic.BaseModel.model_construct` does
    (``__dict__``, ``__pydantic_fields_set__``, ``__pydantic_extra__``, ``__pydantic_private__``
    set directly), bottom-up for nested models, a whole list at once (C-level ``map`` calls, no
    Python frame per record).  The fields set are those present in the struct's encoding
    (required, or not at their default); the struct's ``extra`` fields not at their default
    become the model's extra fields: so ``model_dump(exclude_unset=True)`` and
    :func:`~probeguard_core.logs.write_jsonl` give back the decoded line."""
    struct = struct_of(model, model.__module__)
    names = struct.__struct_fields__
    n_model = len(model.model_fields)
    first_default = len(names) - len(struct.__struct_defaults__)
    optional = list(zip(names[first_default:], struct.__struct_defaults__, strict=True))
    extra_names = names[n_model:]
    always = set(names[:min(first_default, n_model)])
    convert: list[tuple[str, bool, Callable[[list[Any]], list[Any]]]] = []
    for name, info in model.model_fields.items():
        nested = _nested_model(info.annotation)
        if nested is not None:
            convert.append((name, nested[0], model_builder(nested[1])))
    asdict, set_dict, set_fields, set_extra, set_private = (msgspec.structs.asdict, *_BASE_SLOTS.values())

    def build(structs: list[Any]) -> list[_M]:
        dicts = list(map(asdict, structs))
        n = len(dicts)
        for name, many, sub in convert:
            values = [d[name] for d in dicts]
            if many:
                flat = iter(sub(list(chain.from_iterable(values))))
                for d, v in zip(dicts, values, strict=True):
                    d[name] = list(islice(flat, len(v)))
            else:
                at = [i for i, v in enumerate(values) if v is not None]
                for i, m in zip(at, sub([values[i] for i in at]), strict=True):
                    dicts[i][name] = m
        if optional:
            fields_sets: Any = []
            extras: Any = []
            for d in dicts:
                fields_sets.append({*always, *(k for k, default in optional if d[k] != default)})
                extra = {k: d.pop(k) for k in extra_names}
                extras.append({k: v for k, v in extra.items() if k in fields_sets[-1]})
        else:
            fields_sets, extras = map(set.copy, repeat(always, n)), starmap(dict, repeat((), n))
        out = list(map(model.__new__, repeat(model, n)))
        deque(map(set_dict, out, dicts), 0)
        deque(map(set_fields, out, fields_sets), 0)
        deque(map(set_extra, out, extras), 0)
        deque(map(set_private, out, repeat(None, n)), 0)
        return out

    return build
