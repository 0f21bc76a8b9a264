"""Spark jobs over the sharestate core: session, sources, bronze/silver/gold pipelines."""
