"""The report's sections, one module each: its numbers, its table and its words."""
