"""The streaming trainer (lake train watch): the resident loop, its recipes and options, an increment's rows from
the change feed, the wake-up, and `lake train status`."""
