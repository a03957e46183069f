"""The store's widths and ranges, held on every engine (docs/store.md "Widths and ranges").

SQLite keeps a text of any length in a ``VARCHAR(200)`` and any integer in an
``INTEGER``; PostgreSQL refuses the 201st character and 2**31. A name or a number that
works on one engine must not fail on the other, so the limits are read from the store's
own column definitions (:mod:`rcea.study.store.models`) and held by ONE function,
:func:`check_value` (:func:`check_stored` for one model column):

* every engine :func:`rcea.study.store.db.make_engine` makes runs it on each INSERT and
  UPDATE before the statement reaches the database (ORM flushes and Core bulk inserts
  alike): nothing too long or too large is ever written, on any engine, and the refusal
  names the table and column (``audit.name is 250 characters long; the store keeps at
  most 200``);
* the commands that take a name check it first through the same function, so that the
  message names their option (``--name is 250 characters long; …``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import SQLModel

from rcea.study.store import models as _models  # noqa: F401 - registers every table

#: PostgreSQL's ``integer`` (SQLModel's ``int``) and ``bigint``.
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


class WidthError(ValueError):
    """A value the store's column cannot hold on every engine (one line, names the limit)."""


@dataclass(frozen=True)
class Limit:
    """What one column holds: at most ``width`` characters, or integers in ``[low, high]``."""

    table: str
    column: str
    width: int | None = None
    low: int | None = None
    high: int | None = None

    @property
    def field(self) -> str:
        return f"{self.table}.{self.column}"


def _limit(table: str, column: sa.Column[Any]) -> Limit | None:
    kind = column.type
    if isinstance(kind, sa.TypeDecorator):  # SQLModel's AutoString(length=N) wraps String
        kind = kind.impl_instance
    length = getattr(column.type, "length", None)
    if isinstance(kind, sa.String) and isinstance(length, int) and length > 0:
        return Limit(table, column.key, width=length)
    if isinstance(kind, sa.BigInteger):
        return Limit(table, column.key, low=INT64[0], high=INT64[1])
    if isinstance(kind, sa.Integer):
        return Limit(table, column.key, low=INT32[0], high=INT32[1])
    return None


@functools.cache
def limits() -> dict[str, dict[str, Limit]]:
    """table → column → its limit, for every column of the store that has one."""
    out: dict[str, dict[str, Limit]] = {}
    for table in SQLModel.metadata.sorted_tables:
        cols = {c.key: lim for c in table.columns if (lim := _limit(table.name, c)) is not None}
        if cols:
            out[table.name] = cols
    return out


def limit_of(column: Any) -> Limit:
    """The limit of a model's column attribute (``Audit.name``)."""
    expr = column.expression
    return limits()[expr.table.name][expr.key]


def _integer(value: int) -> str:
    return f"{value:,}" if abs(value) < 10**30 else f"an integer of {value.bit_length()} bits"


def check_value(value: Any, limit: Limit, *, option: str | None = None) -> Any:
    """``value`` if ``limit``'s column holds it on every engine; :class:`WidthError`
    naming ``option`` (else the table and column) and the limit, else. ``None`` passes
    (whether a column may be empty is the schema's own rule)."""
    name = option or limit.field
    if isinstance(value, str) and limit.width is not None and len(value) > limit.width:
        raise WidthError(
            f"{name} is {len(value)} characters long; the store keeps at most {limit.width}"
        )
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and limit.low is not None
        and limit.high is not None
        and not limit.low <= value <= limit.high
    ):
        raise WidthError(
            f"{name} is {_integer(value)}; the store keeps integers from "
            f"{limit.low:,} to {limit.high:,}"
        )
    return value


def check_stored(value: Any, column: Any, *, option: str) -> Any:
    """``value`` checked against the model column ``column`` (``Audit.name``), the
    message naming ``option`` (``--name``): what a command calls before it starts."""
    return check_value(value, limit_of(column), option=option)


def check_rows(table: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """Every value of ``rows`` (column → value) of ``table`` against its column's limit."""
    cols = limits().get(table)
    if not cols:
        return
    for row in rows:
        for key, value in row.items():
            lim = cols.get(key)
            if lim is not None and value is not None:
                check_value(value, lim)


def _parameter_rows(multiparams: Any, params: Any) -> list[Mapping[str, Any]]:
    rows: list[Mapping[str, Any]] = []
    for item in (*(multiparams or ()), params):
        if isinstance(item, Mapping):
            rows.append(item)
        elif isinstance(item, list | tuple):
            rows.extend(r for r in item if isinstance(r, Mapping))
    return rows


def _guard(
    conn: Any, statement: Any, multiparams: Any, params: Any, execution_options: Any
) -> None:
    """The engine listener: an INSERT or UPDATE of a table with limits, its values
    (parameters, or those written into the statement) checked before it runs."""
    if not isinstance(statement, sa.Insert | sa.Update):
        return
    table = getattr(statement.table, "name", None)
    if table not in limits():
        return
    rows = _parameter_rows(multiparams, params)
    # values written into the statement (``update(T).values(text=…)``): SQLAlchemy keeps
    # them in private attributes; compiling is the public way to read them back
    if getattr(statement, "_values", None) or getattr(statement, "_multi_values", None):
        rows.append(statement.compile(dialect=conn.dialect).params)
    check_rows(table, rows)


def guard_engine(engine: Engine) -> Engine:
    """Hold every INSERT and UPDATE ``engine`` runs to the store's limits."""
    if not sa.event.contains(engine, "before_execute", _guard):
        sa.event.listen(engine, "before_execute", _guard)
    return engine
