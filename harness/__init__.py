"""The differential harness: identical seeded runs, checks, work accounting, reports."""
