"""Many devices, one model: arrivals, the scheduler in front of the shared model, background work."""
