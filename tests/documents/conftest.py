"""Workflow documents in the test process: the compiler and its problems, the registry of
saved revisions, the statechart, runs of documents on both storages (``backend``).

The documents' API, admin and live runs are in ``tests/api/``, ``tests/admin/``, ``tests/live/``;
the corpus of documents is ``tests/document_corpus.py``.
"""
