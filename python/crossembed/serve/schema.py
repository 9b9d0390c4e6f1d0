"""Request bodies of the service: pydantic models parsed straight from the JSON bytes, then numpy.

Every model forbids unknown fields and is strict (``"3"`` is not an integer,
``1`` is not a boolean). :func:`parse` turns the first validation error into a
:class:`~crossembed.serve.errors.RequestError` whose message starts with the
field (``mean[0][3]: Input should be a valid number``); :func:`matrix` turns
rows of numbers into a float32 array, refusing ragged rows, a wrong
dimension and values that are not finite float32 numbers.
"""

from __future__ import annotations

from typing import Annotated, List, Optional, Type, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crossembed.serve.errors import RequestError

__all__ = [
    "AddBody",
    "RemoveBody",
    "SaveBody",
    "SearchBody",
    "UpsertBody",
    "ids_array",
    "matrix",
    "parse",
]

Id = Annotated[int, Field(ge=0, le=2**63 - 1)]
AnyId = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
Rows = List[List[float]]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SearchBody(_Body):
    """``POST /search``: ``queries`` (texts, for an index with an ensemble) or ``mean`` (+ ``var``)."""

    queries: Optional[List[str]] = None
    mean: Optional[Rows] = None
    var: Optional[Rows] = Field(default=None, description="query variances, >= 0 (default zeros)")
    k: int = Field(default=10, ge=1)
    filter: Optional[List[AnyId]] = Field(default=None, description="ids the results may come from")
    exact: bool = False
    rerank: Optional[int] = Field(default=None, ge=1)
    ef: Optional[int] = Field(default=None, ge=1)
    confidence: bool = Field(
        default=False, description="also return each query's calibrated probability that its top hit is relevant"
    )


class AddBody(_Body):
    """``POST /add``: ``texts`` (encoded by the ensemble), or ``mean`` + ``var`` (and ``texts`` to keep)."""

    texts: Optional[List[str]] = None
    mean: Optional[Rows] = None
    var: Optional[Rows] = None
    ids: Optional[List[Id]] = None


class UpsertBody(AddBody):
    """``POST /upsert``: as ``/add``, with the ids required."""

    ids: List[Id]


class RemoveBody(_Body):
    """``POST /remove``."""

    ids: List[Id]


class SaveBody(_Body):
    """``POST /save``: an optional path (only when the server allows it)."""

    path: Optional[str] = None


_Model = TypeVar("_Model", bound=BaseModel)


def _field(loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def parse(model: Type[_Model], body: bytes) -> _Model:
    """``body`` (JSON bytes) as ``model``; RequestError (400) naming the first bad field."""
    try:
        return model.model_validate_json(body or b"{}")
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        if err["type"] == "json_invalid":
            raise RequestError(400, f"body: malformed JSON ({err['msg']})") from None
        if err["type"] == "model_type":
            raise RequestError(400, "body: must be a JSON object") from None
        if err["type"] == "extra_forbidden":
            known = ", ".join(model.model_fields)
            raise RequestError(400, f"{_field(err['loc'])}: unknown field (expected {known})") from None
        raise RequestError(400, f"{_field(err['loc'])}: {err['msg']}") from None


def matrix(rows: Rows, name: str, dim: int, *, nonnegative: bool = False) -> np.ndarray:
    """``rows`` as a float32 ``(n, dim)`` array: at least one row, all of length ``dim``, finite."""
    try:
        with np.errstate(over="ignore"):  # beyond float32's range: inf, refused below
            arr = np.asarray(rows, dtype=np.float32)
    except ValueError:  # rows of different lengths
        widths = sorted({len(r) for r in rows})
        raise RequestError(400, f"{name}: rows of different lengths {widths[:4]} (ragged)") from None
    if arr.ndim != 2 or len(arr) == 0:
        raise RequestError(400, f"{name}: must hold at least one row")
    if arr.shape[1] != dim:
        raise RequestError(400, f"{name}: rows have {arr.shape[1]} values but the index has dimension {dim}")
    if not np.isfinite(arr.sum(dtype=np.float64)):  # one pass; a non-finite value makes the sum non-finite
        bad = ~np.isfinite(arr).all(axis=1)
        raise RequestError(
            400, f"{name}: row {int(np.flatnonzero(bad)[0])} holds a value that is not a finite float32 number"
        )
    if nonnegative and arr.min() < 0:
        row = int(np.flatnonzero((arr < 0).any(axis=1))[0])
        raise RequestError(400, f"{name}: row {row} holds a negative variance")
    return arr


def ids_array(ids: List[int]) -> np.ndarray:
    """Ids as int64 (their range was checked by the model)."""
    return np.asarray(ids, dtype=np.int64).reshape(-1)
