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
        if version is not None and "not found" in text.lower() and "_versions" not in text:
            raise CompactionError(
                f"table {table}: version {version} of {uri} does not exist ({text.splitlines()[0]})"
            ) from None
        raise CompactionError(
            f"table {table}: {uri} is not a Lance dataset ({text.split(',')[0]})") from None
