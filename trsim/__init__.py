"""SimPy driver of the trcore scheduler: latency models, workloads, baselines, metrics, traces."""
