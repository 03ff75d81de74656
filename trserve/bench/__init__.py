"""``tokenrouter bench``: side-by-side real-engine benchmarks of TokenRouter and its baselines.

``systems`` turns a base serve config into each compared system, ``client`` drives one running server with a
closed-loop workload, ``predict`` gives the throughput model's and the simulator's figures, ``runner`` runs the
matrix with a live display, ``report`` writes JSON, a markdown table and a PNG, ``direct`` drives plain vLLM.
"""
