"""Measurement of the work the fix eliminates: counters, cost model, timing, sweep."""
