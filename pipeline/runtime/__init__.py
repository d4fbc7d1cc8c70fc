"""Process plumbing: logging, memory, child processes, background tasks."""
