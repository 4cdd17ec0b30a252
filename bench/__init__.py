"""durableflow's benchmarks (``./run bench``): see bench/README.md."""
