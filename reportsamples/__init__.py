"""Policy reports shaped as Kyverno writes them, from the Pod Security
Standards "restricted" sample this package carries (``data/``): a Pod's
PolicyReport and EphemeralReport (``reports``), and weeks of a cluster's
reports (``history``) for ``reports-pipeline demo``.

Both the demo (``launcher``) and the benchmark (``bench``) write these
reports, and the benchmark is an optional extra that the product never
imports, so they live here, below both: a leaf that imports nothing of the
project, and no Kafka, ClickHouse or HTTP library either. Pure: no I/O beyond
reading the packaged sample once. What only the benchmark does with them
(the mix of traffic, which Pods fail) stays in ``bench.workload``.
"""
