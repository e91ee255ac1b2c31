"""Files on disk: atomic writes and durable, resumable journals."""
