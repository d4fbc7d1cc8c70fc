"""The trends dashboard: pages of current failures, their history and where
they come from, rendered by the server (HTML and SVG, no JavaScript library)
from the pipeline's ClickHouse tables through a read-only analytics source."""
