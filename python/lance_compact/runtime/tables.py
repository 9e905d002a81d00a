"""Opening the dataset a request names, with errors that say what is wrong."""
from __future__ import annotations

import os

import lance

from ..errors import CompactionError
from .failures import MISSING, classify


def open_dataset(table: str, uri: str, storage_options: dict[str, str] | None = None,
                 version: int | None = None) -> lance.LanceDataset:
    """Open ``uri`` (optionally at ``version``). A failure says what it is: the table does
    not exist (or is not a Lance dataset), the version does not, the object store failed, or
    a file is corrupt (``failures.py``)."""
    try:
        return lance.dataset(uri, version=version, storage_options=storage_options or None)
    except Exception as e:  # Lance raises ValueError, OSError or pyarrow errors
        failure = classify(e)
        if version is not None and failure.kind == MISSING:
            try:
                latest = lance.dataset(uri, storage_options=storage_options or None).version
            except Exception:
                latest = None
            if latest is not None:
                why = ("; older versions may have been cleaned up" if version < latest else "")
                raise CompactionError(
                    f"table {table}: version {version} does not exist (the table is at version "
                    f"{latest}{why})") from None
        if failure.kind == MISSING:
            # Say only what is known: Lance's own words, and for a local folder what is there.
            local = uri[len("file://"):] if uri.startswith("file://") else uri
            if "://" not in local and os.path.isdir(local):
                if not os.path.isdir(os.path.join(local, "_versions")):
                    raise CompactionError(f"table {table}: {uri} is not a Lance dataset (the folder "
                                          "exists but has no _versions folder)") from None
                raise CompactionError(f"table {table}: Lance cannot open {uri} although it has a "
                                      f"_versions folder; Lance reported: {failure.detail}") from None
            raise CompactionError(f"table {table}: {uri} does not exist (no Lance dataset "
                                  "there)") from None
        raise CompactionError(f"table {table}: cannot open {uri}: {failure.phrase} "
                              f"({failure.detail})") from None
