"""The engine process's plumbing: opening tables, failures, cancellation, secrets, settings, rows."""
