"""ringfence's overhead benchmarks: each scenario measures ringfence against a baseline in one run."""
