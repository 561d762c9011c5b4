"""Benchmark suites behind `gangq bench`: synthetic inputs, measured figures."""
