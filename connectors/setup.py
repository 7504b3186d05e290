"""The connector's optional C extension (pyspark_eventhubs/_native.c); the rest is in pyproject.toml.

Built by the virtualenv's locked setuptools with the system's C compiler when one is there (``make
venv`` installs gcc and the Python headers from Debian where it can); ``optional``: without a
compiler the install still succeeds and the connector runs its pure-Python loops
(``pyspark_eventhubs.native``). HUBFLOW_BUILD_NATIVE=0 skips the build.
"""

import os

from setuptools import Extension, setup

NATIVE = Extension(
    "pyspark_eventhubs._native",
    sources=["pyspark_eventhubs/_native.c"],
    extra_compile_args=["-O2", "-std=c11"],
    optional=True,
)

setup(ext_modules=[] if os.environ.get("HUBFLOW_BUILD_NATIVE") == "0" else [NATIVE])
