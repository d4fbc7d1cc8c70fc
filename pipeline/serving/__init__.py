"""The frontend's storage adapters: what ``apiserver`` asks for through the
ports it owns (``apiserver.storage.ports``), done with Kafka and the committer.

- ``writes``: hands a write to the committer (in this process, or through the
  requests and replies topics) and returns its outcome.
- ``changelog``: tails the change log into a bounded in-memory cache (the
  watch cache) that reads, read-your-writes and watches are served from.

Only the process's wiring (``launcher.system``) chooses these; nothing in
``apiserver`` imports them, and they import nothing from ``apiserver``: the
errors they raise are the model's (``pipeline.model.storage``).
"""
