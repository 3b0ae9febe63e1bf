# Entry points for people and CI. Each target installs what it needs first.
JOBS ?= $(shell nproc)

# `make deb`: the Debian package (deploy/debian/) in build/deb.
.PHONY: setup build run deb test test-asan test-tsan test-sanitizers fuzz fuzz-long bench bench-shared bench-daemon clean

setup:
	@bash tools/setup.sh

build: setup
	cmake --preset release >/dev/null
	cmake --build --preset release -j $(JOBS)

# The daemon with its embedded defaults (socket under $XDG_RUNTIME_DIR, else
# /run/memd or /tmp/memd-<uid>; data in ./run/data); Ctrl-C stops it cleanly.
run: build
	./build/release/daemon/memd

deb: build
	deploy/debian/build-deb.sh build/release build/deb

test: build
	ctest --preset release -j $(JOBS)

test-asan: setup
	cmake --preset asan >/dev/null
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan -j $(JOBS)

test-tsan: setup
	cmake --preset tsan >/dev/null
	cmake --build --preset tsan -j $(JOBS)
	ctest --preset tsan -j $(JOBS)

test-sanitizers: test-asan test-tsan

# libFuzzer targets (clang): a short run of each (CI), or an hour of each
# (before a release). See docs/fuzzing.md.
FUZZ_SECONDS ?= 60
fuzz: setup
	tests/fuzz/run.sh $(FUZZ_SECONDS)

fuzz-long: setup
	tests/fuzz/run.sh 3600

bench: build
	python3 bench/run_all.py --build build/release

bench-shared: build
	python3 bench/shared/run_shared.py --build build/release --rounds 5

bench-daemon: build
	python3 bench/daemon/run_daemon.py --build build/release

clean:
	rm -rf build
