"""Condition B': the offline run, its network guard (Python audit hook) and the verdict from strace and audit logs."""
