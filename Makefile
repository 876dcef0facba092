# Thin wrapper over CMake. `make` builds (Release), `make test` builds and runs every test,
# `make bench` runs the benchmarks, `make clean` removes the build folder.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup configure build test bench clean asan

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/CMakeCache.txt: | setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

configure: setup $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	@bash scripts/run_bench.sh $(BUILD)

clean:
	rm -rf $(BUILD)

# The embedded end-to-end run (rl/demo/demo.h): synthetic data -> tokenizer -> tiny Qwen3 -> SFT ->
# multi-turn GRPO -> eval, on the CPU; prints the table, writes runs/demo/report.json.
# DEMO_FLAGS="--full" for the hour-long run, "--seed 2", "--out DIR", "--protocol NAME".
.PHONY: demo
demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target llm_sqlrl
	$(BUILD)/llm_sqlrl demo $(DEMO_FLAGS)
