# ferry: the two commands a new user needs.
#   make run    install what is missing, build, and run the main job (GPU when one answers,
#               else the simulated H200)
#   make test   install what is missing, build, and run every test: plain, then under
#               AddressSanitizer+UndefinedBehaviorSanitizer, then under ThreadSanitizer
# Other targets: build, bench, docs, format, clean.

BUILD      ?= build
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
PLAIN_CMAKE_ARGS ?=
RUN_ARGS   ?=
GEN        := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all deps build run test test-plain test-asan test-tsan test-fuzz bench docs format clean

all: build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) $(GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS) $(PLAIN_CMAKE_ARGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/ferry run $(RUN_ARGS)

test: test-plain test-asan test-tsan test-fuzz

test-plain: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# Sanitizer trees build ferry without CUDA: the sanitizers check ferry's own code, and the
# CUDA backend cannot run on a machine without a GPU. The ASan+UBSan tree also carries the phase
# profile (FERRY_PROF, src/base/prof.h), so that its code is built and run (sim.prof checks it).
test-asan: deps
	cmake -S . -B $(BUILD)-asan $(GEN) -DCMAKE_BUILD_TYPE=Debug -DFERRY_WITH_CUDA=OFF \
	  -DFERRY_BUILD_BENCH=OFF -DFERRY_SANITIZE=address,undefined -DFERRY_PROF=ON $(CMAKE_ARGS)
	cmake --build $(BUILD)-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  FERRY_TEST_SCALE=sanitizer ctest --test-dir $(BUILD)-asan --output-on-failure -j $(JOBS)

test-tsan: deps
	cmake -S . -B $(BUILD)-tsan $(GEN) -DCMAKE_BUILD_TYPE=Debug -DFERRY_WITH_CUDA=OFF \
	  -DFERRY_BUILD_BENCH=OFF -DFERRY_SANITIZE=thread $(CMAKE_ARGS)
	cmake --build $(BUILD)-tsan -j $(JOBS)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 FERRY_TEST_SCALE=sanitizer \
	  ctest --test-dir $(BUILD)-tsan --output-on-failure -j $(JOBS)

test-fuzz: deps
	@if [ -x scripts/fuzz.sh ]; then scripts/fuzz.sh; fi

bench: build
	scripts/bench.sh $(BUILD)

docs: build
	$(BUILD)/ferry options --markdown > docs/options.table.md

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu')

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-fuzz
