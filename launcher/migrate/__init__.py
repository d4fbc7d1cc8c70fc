"""``reports-pipeline migrate in|out``: moving reports between a cluster's CRDs
and the store. ``objects`` decides what each object's copy keeps and counts
the outcomes (pure, no I/O); ``transfer`` does the requests: pages through
both Kubernetes APIs, copies, follows and switches the APIServices."""
