"""What the Spark catalog reads and writes through the engine: tables, properties, system tables."""
