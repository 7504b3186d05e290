"""The lake's tables: how a job writes Delta or parquet exactly once per micro-batch
(:mod:`.tables`, :mod:`.file_sink`), reads a Delta table incrementally (:mod:`.delta_source`), and
keeps Delta tables compact and vacuumed (:mod:`.maintenance`).
"""
