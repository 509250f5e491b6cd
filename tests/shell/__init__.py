"""The asyncio shell: the Scheduler and its Dispatcher, on simulated devices in virtual time."""
