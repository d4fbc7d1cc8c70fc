"""The committer: every write decided against the current version of its
object, and committed to the change log with its reply in one transaction."""
