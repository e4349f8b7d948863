# The two commands a new user runs (README.md), and the ones CI adds.
#   make demo          set up, build, and run the main job on the shipped tutorial
#   make test          set up, build, and pass every test
#   make test-sanitize the tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make fuzz          the parser/elaborator fuzzer for FUZZ_SECONDS (default 60)
#   make golden        rewrite the golden printouts (review the diff before committing)

BUILD ?= build
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 60
TUTORIAL := examples/tutorial

.PHONY: setup build demo test test-sanitize fuzz golden clean

setup:
	@scripts/setup

build: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@ninja -C $(BUILD) -j $(JOBS)

demo: build
	@echo "== quire check $(TUTORIAL)/07_train.qr --summary"
	@cd $(TUTORIAL) && ../../$(BUILD)/quire check 07_train.qr --summary
	@echo "== quire run $(TUTORIAL)/07_train.qr --entry loss --dim B=4"
	@cd $(TUTORIAL) && ../../$(BUILD)/quire run 07_train.qr --entry loss --dim B=4
	@echo "== quire train $(TUTORIAL)/07_train.qr --run-dir $(BUILD)/demo-run"
	@rm -rf $(BUILD)/demo-run
	@cd $(TUTORIAL) && ../../$(BUILD)/quire train 07_train.qr --run-dir ../../$(BUILD)/demo-run \
		--params-out ../../$(BUILD)/demo-run/trained.safetensors

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-sanitize: setup
	@cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug -DQUIRE_SANITIZE=ON >/dev/null
	@ninja -C build-sanitize -j $(JOBS)
	@cd build-sanitize && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j $(JOBS)

fuzz: setup
	@CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQUIRE_FUZZ=ON -DQUIRE_SANITIZE=ON >/dev/null
	@ninja -C build-fuzz -j $(JOBS) fuzz_frontend
	@mkdir -p build-fuzz/corpus
	@cp $(TUTORIAL)/*.qr tests/lang/*/*.qr build-fuzz/corpus/ 2>/dev/null || true
	@build-fuzz/fuzz/fuzz_frontend -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 build-fuzz/corpus 2>&1 | tail -n 15

golden: build
	@scripts/golden --quire $(BUILD)/quire --update

clean:
	rm -rf build build-sanitize build-fuzz
