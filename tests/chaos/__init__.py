"""The chaos suite: faults injected into a real cluster, promises checked in SQL (``./run chaos``)."""
