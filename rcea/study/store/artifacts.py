"""Token-level Parquet artifacts: one file per ingest, one row per trajectory."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rcea.pipeline.safety import path_under, private_dir


def new_artifact_path(artifacts_dir: Path, study_name: str) -> Path:
    """A fresh, unique artifact path for ``study_name`` (the directory is created, 0700;
    the name goes through ``rcea.pipeline.safety.path_under``)."""
    target_dir = private_dir(path_under(artifacts_dir, study_name))
    return target_dir / f"tokens-{uuid.uuid4().hex}.parquet"


def write_token_artifact(
    final: Path,
    trajectory_ids: list[str],
    values: np.ndarray[Any, Any],
    offsets: np.ndarray[Any, Any],
    present: np.ndarray[Any, Any],
) -> Path:
    """Write ``token_entropies`` lists (float32 input stays float32) to ``final``.

    The file is written under a temporary name and renamed into place, so a reader never
    sees a half-written artifact. The caller removes it if its database transaction fails.
    """
    tmp = final.with_suffix(".parquet.tmp")
    validity = pa.array(present, type=pa.bool_())
    value_type = pa.float32() if values.dtype == np.float32 else pa.float64()
    lists = pa.LargeListArray.from_arrays(
        pa.array(offsets.astype(np.int64), type=pa.int64()),
        pa.array(values, type=value_type),
        mask=pa.compute.invert(validity),
    )
    table = pa.table(
        {"trajectory_id": pa.array(trajectory_ids, type=pa.string()), "token_entropies": lists}
    )
    pq.write_table(table, tmp, compression="lz4")
    os.chmod(tmp, 0o600)
    os.replace(tmp, final)
    return final


def read_token_entropies(
    path: Path, rows: list[int] | None = None
) -> list[np.ndarray[Any, Any] | None]:
    """Read token-entropy arrays back (all rows, or the given row numbers)."""
    col = pq.read_table(path, columns=["token_entropies"]).column("token_entropies")
    col = col.combine_chunks()
    if rows is not None:
        col = col.take(pa.array(rows, type=pa.int64()))
    out: list[np.ndarray[Any, Any] | None] = []
    for i in range(len(col)):
        item = col[i]
        out.append(None if not item.is_valid else np.asarray(item.values.to_numpy()))
    return out
