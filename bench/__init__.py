"""Benchmarks: each prints a table and writes bench/results/<benchmark>.json with every figure."""
