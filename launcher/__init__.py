"""Entry points: the ``reports-pipeline`` command, which wires the pipeline and
the frontend into running processes. The only package that imports both."""
