"""Benchmarks of the coordinator against floors measured in the same run: `python -m bench`.

Not tests: no module here is named test_*, and pytest's testpaths is tests/.
"""
