"""What the processes tell about themselves: Prometheus metrics and the
readers' lag behind the change log."""
