# Quick start: `make demo` (install everything, run the bundled real-speech call) and
# `make test` (install everything, run the test suite).
.PHONY: setup demo test bench
setup:
	bash scripts/setup.sh
demo: setup
	.venv/bin/rejoinder demo
test: setup
	.venv/bin/python -m pytest -q
bench: setup
	.venv/bin/python bench/v2v.py
