"""Opening the dataset a request names, with errors that say what is wrong."""
from __future__ import annotations

import lance

from .errors import CompactionError


def open_dataset(table: str, uri: str, storage_options: dict[str, str] | None = None,
                 version: int | None = None) -> lance.LanceDataset:
    """Open ``uri`` (optionally at ``version``); fail clearly if it is not a Lance dataset."""
    try:
        return lance.dataset(uri, version=version, storage_options=storage_options or None)
    except (ValueError, OSError) as e:
        text = str(e)
        if version is not None:
            try:
                latest = lance.dataset(uri, storage_options=storage_options or None).version
            except (ValueError, OSError):
                latest = None
            if latest is not None:
                raise CompactionError(
                    f"table {table}: version {version} does not exist (the table is at version "
                    f"{latest}; older versions may have been cleaned up)") from None
        raise CompactionError(
            f"table {table}: {uri} is not a Lance dataset ({text.split(',')[0]})") from None
