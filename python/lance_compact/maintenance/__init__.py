"""Table and warehouse maintenance: health, policies, index optimization, cleanup."""
