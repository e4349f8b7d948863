# The two commands a new user runs (README.md), and the ones CI adds.
#   make demo          set up, build, and run the main job on the shipped tutorial
#   make test          set up, build, and pass every test
#   make test-sanitize the tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make fuzz          every fuzzer (front end, each reader) for FUZZ_SECONDS each (default 45)
#   make golden        rewrite the golden printouts (review the diff before committing)
#   make explain       rewrite docs/explain/, the tutorial's explain document (a test holds it current)

BUILD ?= build
JOBS ?= $(shell nproc)
# Seconds of fuzzing per target. CI's fuzz step must stay within 5 minutes:
# 4 targets x 45 s = 180 s of fuzzing, plus the regression inputs (well under
# a second each) and libFuzzer's start-up, leaves about 2 minutes for building
# build-fuzz from the cache.
FUZZ_SECONDS ?= 45
FUZZ_TARGETS := fuzz_frontend fuzz_safetensors fuzz_numpy fuzz_artifacts
TUTORIAL := examples/tutorial

# The tutorial's explain document: the one docs/explain/ holds and `make demo` writes.
EXPLAIN_ARGS := 07_train.qr --entry loss --dim B=4 --budget 1e-3

.PHONY: setup build demo test test-sanitize fuzz golden explain clean

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
	@echo "== quire explain $(TUTORIAL)/$(EXPLAIN_ARGS) -o $(BUILD)/demo-run/explain"
	@cd $(TUTORIAL) && ../../$(BUILD)/quire explain $(EXPLAIN_ARGS) -o ../../$(BUILD)/demo-run/explain
	@echo "The explain document: $(BUILD)/demo-run/explain/explain.html (and explain.md beside it)"

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-sanitize: setup
	@cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug -DQUIRE_SANITIZE=ON >/dev/null
	@ninja -C build-sanitize -j $(JOBS)
	@cd build-sanitize && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j $(JOBS)

fuzz: setup
	@CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQUIRE_FUZZ=ON -DQUIRE_SANITIZE=ON >/dev/null
	@ninja -C build-fuzz -j $(JOBS) $(FUZZ_TARGETS)
	@scripts/fuzz --build build-fuzz --seconds $(FUZZ_SECONDS) $(FUZZ_TARGETS)

golden: build
	@scripts/golden --quire $(BUILD)/quire --update

explain: build
	@cd $(TUTORIAL) && ../../$(BUILD)/quire explain $(EXPLAIN_ARGS) -o ../../docs/explain

clean:
	rm -rf build build-sanitize build-fuzz
