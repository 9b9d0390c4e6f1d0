"""Request bodies of the service: pydantic models parsed straight from the JSON bytes, then numpy.

Every model forbids unknown fields and is strict (``"3"`` is not an integer,
``1`` is not a boolean), and every list stops at its first bad item (a list of
a million wrong items is one error, not a million). :func:`parse` turns the
validation error into a :class:`~crossembed.serve.errors.RequestError` whose
message starts with the field (``mean[0][3]: Input should be a valid
number``); :func:`decode` also turns the number lists into arrays in one go
(:func:`rows_array` refuses ragged rows and values that are not finite
float32 numbers). It runs in a separate process for large bodies
(:mod:`crossembed.serve.bodies`), so it imports nothing heavy.
"""

from __future__ import annotations

from typing import Annotated, Any, List, Literal, Optional, Type, TypeVar, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crossembed.serve.errors import RequestError

__all__ = [
    "AddBody",
    "EmbedBody",
    "EmbeddingsBody",
    "RemoveBody",
    "SaveBody",
    "SearchBody",
    "UpsertBody",
    "decode",
    "ids_array",
    "matrix",
    "parse",
    "rows_array",
]

Id = Annotated[int, Field(ge=0, le=2**63 - 1)]
AnyId = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
_FirstError = Field(fail_fast=True)
Rows = Annotated[List[Annotated[List[float], _FirstError]], _FirstError]
Texts = Annotated[List[str], _FirstError]
Ids = Annotated[List[Id], _FirstError]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SearchBody(_Body):
    """``POST /search``: ``queries`` (texts, for an index with an ensemble) or ``mean`` (+ ``var``)."""

    queries: Optional[Texts] = None
    mean: Optional[Rows] = None
    var: Optional[Rows] = Field(default=None, description="query variances, >= 0 (default zeros)")
    k: int = Field(default=10, ge=1)
    filter: Optional[Annotated[List[AnyId], _FirstError]] = Field(
        default=None, description="ids the results may come from"
    )
    exact: bool = False
    rerank: Optional[int] = Field(default=None, ge=1)
    ef: Optional[int] = Field(default=None, ge=1)
    confidence: bool = Field(
        default=False, description="also return each query's calibrated probability that its top hit is relevant"
    )


class AddBody(_Body):
    """``POST /add``: ``texts`` (encoded by the ensemble), or ``mean`` + ``var`` (and ``texts`` to keep)."""

    texts: Optional[Texts] = None
    mean: Optional[Rows] = None
    var: Optional[Rows] = None
    ids: Optional[Ids] = None


class UpsertBody(AddBody):
    """``POST /upsert``: as ``/add``, with the ids required."""

    ids: Ids


class RemoveBody(_Body):
    """``POST /remove``."""

    ids: Ids


class SaveBody(_Body):
    """``POST /save``: an optional path (only when the server allows it)."""

    path: Optional[str] = None


class EmbedBody(_Body):
    """``POST /embed``: texts -> the ensemble's Gaussians (``mean``, ``var``) and each model's ``weights``."""

    texts: Texts
    role: Literal["query", "passage"] = Field(default="query", description="encode as queries or as documents")


class EmbeddingsBody(_Body):
    """``POST /v1/embeddings`` (OpenAI's request): ``input`` texts -> the ensemble's means."""

    input: Union[str, Texts] = Field(description="a text or a list of texts (token ids are not accepted)")
    model: str
    encoding_format: Literal["float", "base64"] = Field(
        default="float", description="base64: the little-endian float32 bytes of each embedding"
    )
    dimensions: Optional[int] = Field(default=None, ge=1, description="must be the served dimension when given")
    user: Optional[str] = Field(default=None, description="accepted and ignored")
    role: Literal["query", "passage"] = Field(default="query", description="crossembed's: queries or documents")


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


def rows_array(rows: Any, name: str, *, nonnegative: bool = False) -> np.ndarray:
    """``rows`` as a float32 ``(n, d)`` array in one conversion: at least one row, all of one length, finite."""
    try:
        with np.errstate(over="ignore"):  # beyond float32's range: inf, refused below
            arr = np.asarray(rows, dtype=np.float32)
    except ValueError:  # rows of different lengths
        widths = sorted({len(r) for r in rows})
        raise RequestError(400, f"{name}: rows of different lengths {widths[:4]} (ragged)") from None
    if arr.ndim != 2 or len(arr) == 0:
        raise RequestError(400, f"{name}: must hold at least one row")
    if not np.isfinite(arr.sum(dtype=np.float64)):  # one pass; a non-finite value makes the sum non-finite
        bad = ~np.isfinite(arr).all(axis=1)
        raise RequestError(
            400, f"{name}: row {int(np.flatnonzero(bad)[0])} holds a value that is not a finite float32 number"
        )
    if nonnegative and arr.min() < 0:
        row = int(np.flatnonzero((arr < 0).any(axis=1))[0])
        raise RequestError(400, f"{name}: row {row} holds a negative variance")
    return arr


def matrix(rows: Any, name: str, dim: int, *, nonnegative: bool = False) -> np.ndarray:
    """``rows`` (lists, or an array from :func:`decode`) as a float32 ``(n, dim)`` array (:func:`rows_array`)."""
    arr = rows_array(rows, name, nonnegative=nonnegative)
    if arr.shape[1] != dim:
        raise RequestError(400, f"{name}: rows have {arr.shape[1]} values but the index has dimension {dim}")
    return arr


def decode(model: Type[_Model], body: bytes) -> _Model:
    """``body`` parsed as ``model``, its number lists (``mean``, ``var``, ``ids``, ``filter``) as numpy
    arrays (float32 rows through :func:`rows_array`, int64 ids): cheap to hand between processes and to check."""
    req = parse(model, body)
    update = {}
    for name in ("mean", "var"):
        if getattr(req, name, None) is not None:
            update[name] = rows_array(getattr(req, name), name, nonnegative=name == "var")
    for name in ("ids", "filter"):
        if getattr(req, name, None) is not None:
            update[name] = ids_array(getattr(req, name))
    return req.model_copy(update=update) if update else req


def ids_array(ids: List[int]) -> np.ndarray:
    """Ids as int64 (their range was checked by the model)."""
    return np.asarray(ids, dtype=np.int64).reshape(-1)
