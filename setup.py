"""The optional C part of ddtreed: `ddtreed._fastscan`, the serving watch's decode-line reading.

Everything else is in pyproject.toml. `optional=True`: where no C compiler (or no Python headers)
is found the build goes on without it, and ddtreed reads decode lines with `re` instead
(ddtreed/health/serving.py; `ddtreed --version` names the path in use).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ddtreed._fastscan", ["ddtreed/_fastscan.c"], optional=True)])
