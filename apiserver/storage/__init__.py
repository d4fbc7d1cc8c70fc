"""The report service: reads, writes and watches over the ports it defines
(``ports``), which ``pipeline`` adapters implement. It never imports a driver
or an adapter; ``launcher.system`` wires the adapters in."""
