"""Acoustic measurement: minimal package marker (the acoustic helper owns this file)."""
