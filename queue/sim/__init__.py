"""Trace-driven simulation of admission policies on a virtual clock.

Replays a trace of job arrivals against the real decision core (no HTTP, no database) and
against baseline policies, and reports utilization, waits, partial starts and preemptions.
"""
