"""The project's tools and house rules: benchmarks, colab-check, gpu-check, make setup, the structure rules, the suite's time."""
