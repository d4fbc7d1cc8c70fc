"""Who may call and what they may do: authentication, authorization, the
request attributes they decide on, and the serving certificate and token.
No storage: access is decided before a request reaches the service."""
