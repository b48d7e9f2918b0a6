"""spark-submit check (docs/spark.md, "Beyond one machine"): read an odradek topic, copy it to
another and print the row count and the Python executable the executors ran, e.g.

    PYSPARK_DRIVER_PYTHON=./env/bin/python PYSPARK_PYTHON=./env/bin/python \
    spark-submit --master spark://host:7077 --archives odradek-env.tar.gz#env \
        scripts/spark_submit_check.py BOOTSTRAP SOURCE_TOPIC SINK_TOPIC
"""
import sys

from pyspark.sql import SparkSession

import odradek.spark

bootstrap, source, sink = sys.argv[1:4]
spark = SparkSession.builder.appName("odradek-spark-submit-check").getOrCreate()
odradek.spark.register(spark)
df = (spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
      .option("subscribe", source).load())
rows = df.count()
df.select("key", "value").write.format("odradek").option("kafka.bootstrap.servers", bootstrap) \
    .option("topic", sink).mode("append").save()
pythons = (spark.sparkContext.parallelize(range(4), 2)
           .map(lambda _: __import__("sys").executable).distinct().collect())
print("ROWS", rows, "EXECUTOR_PYTHONS", pythons, flush=True)
spark.stop()
