"""CUDA-only checks and figures: graph capture and replay, host syncs, bandwidth."""
