"""ddtreed_demo_engine: the demo service's model runner, installed into the demo's site-packages.

It plays the part of `sglang/srt/model_executor/` for the demo: ddtreed's founding remediation
patches `cuda_graph_runner.py` here exactly as it would patch SGLang.
"""

__version__ = "0.1.0"
