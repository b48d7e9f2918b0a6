"""Example pipelines on odradek + Spark (see docs/spark.md); run from the repository root."""
