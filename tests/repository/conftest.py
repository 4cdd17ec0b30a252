"""The repository as a whole: the layers and what each may import, the architecture (verbs
once, the storage protocol whole), the package (wheel, sdist, a fresh clone's install), the
benchmarks' smoke run, and the test suite's own rules (every test on workers marked).
"""
