"""What the frontend, as a server the kube-apiserver delegates to, asks of that
kube-apiserver: TokenReviews and SubjectAccessReviews (``reviews``) and the
aggregator's front-proxy CA, kept current in a pod (``frontproxy``). All of it
through ``kubeclient``; the decisions themselves live in ``apiserver``."""
