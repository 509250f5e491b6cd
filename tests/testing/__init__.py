"""tierlm.testing: the virtual-time loop and its pytest plugin."""
