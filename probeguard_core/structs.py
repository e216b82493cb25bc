"""msgspec structs derived from pydantic models: one definition of a record (the model), read
fast (issue 24).

:func:`struct_of` builds, from a model's fields, a :class:`msgspec.Struct` with the same field
names, order, types and bounds (``ge``, ``le``, ``min_length``, ``max_length``; strict types and
finite numbers are msgspec's JSON behaviour), so a record type is never written twice; an
annotation or constraint without a msgspec equivalent stops the import instead of loosening the
struct.  The structs answer the pydantic calls that callers make on a record
(``model_dump``, ``model_copy``, ``model_extra``, ``==`` with the model).
:mod:`probeguard_core.logs` derives the structs of its records here and applies their rules.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import msgspec
from pydantic import BaseModel, Strict
from pydantic.fields import FieldInfo

__all__ = ["StructRecord", "struct_of"]


class StructRecord(msgspec.Struct, gc=False):
    """Base of the derived structs: the pydantic calls that callers make on a read record."""

    @property
    def model_extra(self) -> dict[str, Any]:
        """Always empty: a reader returns the model itself for a record with fields beyond the model's."""
        return {}

    def model_dump(self, mode: str = "python", exclude: set[str] | None = None) -> dict[str, Any]:
        """The record as plain values, as :meth:`pydantic.BaseModel.model_dump` gives them."""
        out = msgspec.to_builtins(self, enc_hook=_model_builtins)
        for name in exclude or ():
            out.pop(name, None)
        return out

    def model_copy(self, update: dict[str, Any] | None = None) -> Any:
        """A copy with ``update`` applied (not validated, as in pydantic)."""
        return msgspec.structs.replace(self, **(update or {}))

    def __eq__(self, other: object) -> bool:
        """Equal to its pydantic model when both hold the same values (and no extra field)."""
        if isinstance(other, BaseModel):
            return type(self) is _STRUCTS.get(type(other)) and self.model_dump() == other.model_dump()
        if type(other) is not type(self):
            return NotImplemented
        return msgspec.structs.astuple(self) == msgspec.structs.astuple(other)  # type: ignore[arg-type]

    __hash__ = None  # type: ignore[assignment]  # mutable, as the pydantic models


def _model_builtins(obj: Any) -> Any:
    """A pydantic record placed inside a struct (``model_copy(update={"cost": Cost(...)})``)."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    raise TypeError(f"cannot write a {type(obj).__name__} in a record")


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
