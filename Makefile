# Makefile — the two set-up commands (make demo, make test) and their building blocks.
# Everything real happens in CMake; this file only orders the steps.
BUILD     ?= build
BUILD_CPU ?= build-cpu
JOBS      ?= $(shell nproc)
# ctest runs one more test than there are cores: the multi-rank tests spend part of their time waiting on each
# other (mpirun start-up, messages), and an extra test fills that time (on 2 cores the suite ends 8% sooner)
TEST_JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
CTEST_ARGS ?=
# more cmake -D options for the builds (CI: -DRRFP_DEBUG_INFO=lines, line tables only)
CMAKE_ARGS ?=

BUILD_ASAN ?= build-asan
# The generator of a build folder configured here for the first time: Ninja where it is installed, else cmake's default
# (Unix Makefiles). Ninja starts an object as soon as what it includes exists, where make builds one target after
# another (a library's objects wait for every library it links, and the C libraries for the CUDA backend's objects),
# leaving a core idle for part of the build (bench/README.md "The build's two cores"). A configured folder keeps
# its generator; set CMAKE_GENERATOR to choose (cmake reads it from the environment).
ifeq ($(origin CMAKE_GENERATOR),undefined)
ifneq ($(shell command -v ninja 2>/dev/null),)
export CMAKE_GENERATOR := Ninja
endif
endif

.PHONY: all deps deps-test deps-demo build build-cpu build-asan test test-cpu test-asan demo bench clean

all: build

deps:
	@scripts/deps.sh

# the suite's set-up also wants a browser for the report page's test (skipped where it cannot be had)
deps-test:
	@scripts/deps.sh --with-browser

# the demo's set-up: only the CPU build's packages (no PyTorch, node or browser: they are the suite's)
deps-demo:
	@scripts/deps.sh --demo

# configured once (cmake --build configures again when a CMakeLists.txt or .cmake changes); CMakeCache.txt, not
# a generator's file, so that a Ninja folder is not configured again at every make
$(BUILD)/CMakeCache.txt: CMakeLists.txt | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

build-cpu: deps
	cmake -S . -B $(BUILD_CPU) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRRFP_CUDA=OFF $(CMAKE_ARGS)
	cmake --build $(BUILD_CPU) -j $(JOBS)

# The whole suite on the default build (CUDA compiled when nvcc is present; gpu tests skip without a device).
test: deps-test build
	cd $(BUILD) && ctest --output-on-failure --no-tests=error -j $(TEST_JOBS) $(CTEST_ARGS)

# The CPU-only build's suite (not in CI: `make test` runs every test already; README.md's table of targets).
test-cpu: deps-test build-cpu
	cd $(BUILD_CPU) && ctest --output-on-failure --no-tests=error -j $(TEST_JOBS) $(CTEST_ARGS)

# The sanitizer build (AddressSanitizer + UndefinedBehaviorSanitizer, CPU only) and its selection of the
# suite (label asan: unit, input-handling, CLI and 2-rank pipeline tests, and the CPU-only build's refusal
# of the CUDA backend; tests/asan/asan.cmake). A
# sanitizer report fails the test; every report is kept in $(BUILD_ASAN)/sanitizer-reports/. Only the
# executables the selection runs are built (tests/asan/targets.py reads them from the configured tests).
build-asan: deps
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRRFP_CUDA=OFF -DRRFP_SANITIZE=ON $(CMAKE_ARGS)
	targets=$$(/usr/bin/python3 tests/asan/targets.py $(BUILD_ASAN)) && cmake --build $(BUILD_ASAN) -j $(JOBS) --target $$targets

test-asan: deps-test build-asan
	cd $(BUILD_ASAN) && ctest --output-on-failure --no-tests=error -j $(TEST_JOBS) -L asan $(CTEST_ARGS)

# The demo trains on the CPU and needs only the executable: the CPU-only build of the rrfp-mm target
# (building the tests, or the CUDA kernels with nvcc, would take most of its time budget).
demo: deps-demo
	cmake -S . -B $(BUILD_CPU) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRRFP_CUDA=OFF
	cmake --build $(BUILD_CPU) -j $(JOBS) --target rrfp-mm
	scripts/demo.sh $(BUILD_CPU)/rrfp-mm

bench: build
	bench/ops.sh $(BUILD)/rrfp-mm

clean:
	rm -rf $(BUILD) $(BUILD_CPU) $(BUILD_ASAN)
