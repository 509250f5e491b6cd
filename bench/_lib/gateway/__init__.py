"""``gateway_load.py``'s parts: the plan, the clients, the server, the stats, the table."""
