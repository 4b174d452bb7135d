"""Generic, bounded file and YAML reading: no engine, no manifest words."""
