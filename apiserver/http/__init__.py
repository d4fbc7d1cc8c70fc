"""The HTTP face of the frontend: routes and the Starlette app, content
negotiation, discovery, the uvicorn protocol and request metrics.
It decides nothing about objects itself: it parses requests, calls the
report service and renders what comes back."""
