# colibri - build, test, run.
#
#   make            build everything (bin/coli, bin/coli-worker, plugins, tests)
#   make run        build what the main job runs (not the tests), then run the bundled model
#   make test       build, then run the whole test suite
#   make deps       install what is missing (Debian 12, apt-get, as root)
#   make bench      benchmarks, results in docs/benchmarks.md
#
# BUILD=dir puts every output under dir (default build/), so two builds with
# different flags (SANITIZE=1 uses build-asan/) never mix their objects.

SHELL   := /bin/bash

# Build in parallel, one job per core; JOBS=1 builds serially. Only the top-level make sets
# it: sub-makes share its job server (setting -j again there would start a second one).
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
ifeq ($(MAKELEVEL),0)
MAKEFLAGS += -j$(JOBS)
endif
SANITIZE ?= 0
ifeq ($(SANITIZE),1)
BUILD   ?= build-asan
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else
BUILD   ?= build
SANFLAGS :=
endif

CC      ?= cc
OPT     ?= -O2
CFLAGS  += -std=gnu11 $(OPT) -g -Wall -Wextra -Wno-unused-parameter -fPIC -pthread $(SANFLAGS) \
           -Iinclude -I. -I$(BUILD)/gen
LDFLAGS += $(SANFLAGS) -pthread
LDLIBS  += -lzmq -lprotobuf-c -ldl -lm -lmicrohttpd -lcjson -ledit

# ---- sources ---------------------------------------------------------------
CORE_SRC   := $(wildcard core/*.c core/gguf/*.c core/quant/*.c core/kernels/*.c core/tokenizer/*.c)
COORD_SRC  := $(wildcard coordinator/*.c coordinator/sched/*.c)
WIRE_SRC   := $(wildcard proto/*.c)
CPU_SRC    := $(wildcard plugins/cpu/*.c)
WORKER_SRC := $(wildcard workers/*.c)
CLI_SRC    := $(wildcard tools/coli/*.c)
SERVER_SRC := $(wildcard tools/coli/server/*.c tools/coli/chat/*.c)
PROTO_SRC  := $(wildcard proto/*.proto)
PROTO_GEN  := $(patsubst proto/%.proto,$(BUILD)/gen/proto/%.pb-c.c,$(PROTO_SRC))
TEST_SRC   := $(wildcard tests/test_*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
CORE_OBJ   := $(call obj,$(CORE_SRC))
COORD_OBJ  := $(call obj,$(COORD_SRC))
WIRE_OBJ   := $(call obj,$(WIRE_SRC))
CPU_OBJ    := $(call obj,$(CPU_SRC))
WORKER_OBJ := $(call obj,$(WORKER_SRC))
CLI_OBJ    := $(call obj,$(CLI_SRC))
SERVER_OBJ := $(call obj,$(SERVER_SRC))
PROTO_OBJ  := $(patsubst %.c,%.o,$(PROTO_GEN))

# $(LIB) holds every object with every symbol: our programs and tests link it.
# $(PUBLIC_LIB) is what a program using the C API links (see its rule).
LIB        := $(BUILD)/lib/libcolibri-internal.a
PUBLIC_LIB := $(BUILD)/lib/libcolibri.a
# The HTTP server (tools/coli/server/) and the chat templates and tokenize helpers it shares
# with the CLI (tools/coli/chat/): coli serve and the tests link it before $(LIB).
SERVER_LIB := $(BUILD)/lib/libcoli-server.a
COLI       := $(BUILD)/bin/coli
WORKER     := $(BUILD)/bin/coli-worker
CPU_PLUGIN := $(BUILD)/lib/libcoli-cpu.so
TESTS      := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
TOOLS      := $(patsubst tools/%.c,$(BUILD)/bin/%,$(wildcard tools/*.c))

FIXTURES   := $(BUILD)/fixtures/.stamp

.PHONY: all run test test-sanitize deps bench bandwidth clean fixtures check-style
# Generated protocol sources are inputs of several rules: keep them.
.SECONDARY: $(PROTO_GEN)

# The first rule is the default goal: `make` builds everything.
all: $(COLI) $(WORKER) $(CPU_PLUGIN) $(PUBLIC_LIB) $(SERVER_LIB) $(TOOLS) $(TESTS)

check-style:
	tools/check_style.sh

# ---- generated protocol code (never committed) -----------------------------
$(BUILD)/gen/proto/%.pb-c.c $(BUILD)/gen/proto/%.pb-c.h: proto/%.proto
	@mkdir -p $(dir $@)
	protoc-c --c_out=$(BUILD)/gen $<

$(BUILD)/gen/proto/%.pb-c.o: $(BUILD)/gen/proto/%.pb-c.c
	$(CC) $(CFLAGS) -c $< -o $@

# Every object may include generated protocol headers.
$(BUILD)/obj/%.o: %.c $(PROTO_GEN)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# (tests and single-file tools too: some test files include a .c they test)
-include $(shell find $(BUILD)/obj $(BUILD)/tests $(BUILD)/bin -name '*.d' 2>/dev/null)

# ---- libraries and programs -------------------------------------------------
$(LIB): $(CORE_OBJ) $(WIRE_OBJ) $(COORD_OBJ) $(CPU_OBJ) $(PROTO_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# libcolibri.a: the library's objects linked into one (ld -r) whose only global
# symbols are the coli_-prefixed ones (the API of include/colibri.h, and internal
# names that carry the prefix): the other ~200 (model_open, stats_json, ring_send,
# ...) become local, so they cannot collide with a program's own names. The
# xdna package code (coli xdna check, xdna_pack) is left out: it needs libsodium.
PUBLIC_OBJ := $(CORE_OBJ) $(WIRE_OBJ) $(COORD_OBJ) $(CPU_OBJ) $(PROTO_OBJ)
$(PUBLIC_LIB): $(PUBLIC_OBJ)
	@mkdir -p $(dir $@)
	ld -r -o $(BUILD)/lib/colibri-all.o $^
	nm -g --defined-only $(BUILD)/lib/colibri-all.o | awk '$$3 ~ /^coli_/ {print $$3}' >$(BUILD)/lib/colibri.syms
	objcopy --keep-global-symbols=$(BUILD)/lib/colibri.syms $(BUILD)/lib/colibri-all.o $(BUILD)/lib/colibri.o
	rm -f $@ $(BUILD)/lib/colibri-all.o && ar rcs $@ $(BUILD)/lib/colibri.o

$(SERVER_LIB): $(SERVER_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(COLI): $(CLI_OBJ) $(SERVER_LIB) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(SERVER_LIB) $(LIB) $(LDLIBS)

$(WORKER): $(WORKER_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(WORKER_OBJ) $(LIB) $(LDLIBS)

# A plugin exports one symbol (moe_plugin_get); the version script hides the rest.
$(CPU_PLUGIN): $(CPU_OBJ) $(CORE_OBJ) plugins/plugin.map
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -Wl,--version-script=plugins/plugin.map -o $@ $(CPU_OBJ) $(CORE_OBJ) -lm

# gen_model: tools/gen_model.c plus its vocabulary builder (tools/gen_model/)
GEN_MODEL_SRC := tools/gen_model.c $(wildcard tools/gen_model/*.c)
$(BUILD)/bin/gen_model: $(GEN_MODEL_SRC) $(wildcard tools/gen_model/*.h) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(GEN_MODEL_SRC) $(LIB) $(LDLIBS)

# Single-file tools: tools/NAME.c -> bin/NAME
$(BUILD)/bin/%: tools/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(SERVER_LIB) $(LIB) $(PUBLIC_LIB) $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP $(LDFLAGS) -o $@ $< $(SERVER_LIB) $(LIB) $(LDLIBS) -lcriterion -lcjson

# The dashboard page of coli serve, compiled in as one C string literal
# (server_dashboard.c includes it): \ and " escaped, each line a "...\n" piece.
$(BUILD)/gen/tools/coli/server/dashboard_html.h: tools/coli/server/dashboard.html
	@mkdir -p $(dir $@)
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@
$(BUILD)/obj/tools/coli/server/server_dashboard.o: $(BUILD)/gen/tools/coli/server/dashboard_html.h

# ---- set-up -------------------------------------------------------------------
# $(call apt_install,TARGET,PACKAGES[,apt-get flags]): install the Debian packages
# that are missing (as root), saying which; nothing when all are there.
define apt_install
@missing=""; for p in $(2); do \
  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
if [ -n "$$missing" ]; then \
  echo "make $(1): installing$$missing"; \
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(3) $$missing; \
fi
endef

DEB_PKGS := build-essential pkg-config libzmq3-dev libprotobuf-c-dev protobuf-c-compiler \
            libcriterion-dev python3 python3-numpy libmicrohttpd-dev libcjson-dev libedit-dev clang-format
deps:
	$(call apt_install,deps,$(DEB_PKGS))

# ---- the main job -----------------------------------------------------------
MODEL ?= models/tiny-moe-4e2r-f16.gguf
PROMPT ?= And it came to pass
# Only what `coli run` needs: the CLI, and the worker and CPU plugin for --devices with workers.
run: deps
	$(MAKE) $(COLI) $(WORKER) $(CPU_PLUGIN)
	@if [ ! -f "$(MODEL)" ]; then echo "make run: $(MODEL) missing, generating a random fixture"; \
	  $(MAKE) fixtures; fi
	$(COLI) run -m $$( [ -f "$(MODEL)" ] && echo "$(MODEL)" || echo "$(BUILD)/fixtures/tiny-llama-moe-f32.gguf" ) \
	  -p "$(PROMPT)" -n 64 --temp 0.7 --seed 1

# ---- the bundled model: retrain tiny-moe-4e2r (docs/models.md) ----------------
# Only this target needs these (make test stays lean). libopenblas0-pthread gives
# Debian's torch a fast BLAS (its default reference BLAS is ~10x slower).
TRAIN_PKGS := python3-torch python3-sentencepiece sentencepiece python3-matplotlib \
              bible-kjv bible-kjv-text libopenblas0-pthread
TRAIN_OUT ?= tools/train/out
.PHONY: train train-deps
train-deps: deps
	$(call apt_install,train-deps,$(TRAIN_PKGS))
train: deps train-deps
	/usr/bin/python3 tools/train/train.py --out $(TRAIN_OUT)
	$(MAKE) $(COLI)
	/usr/bin/python3 tools/train/export.py --out $(TRAIN_OUT) --coli $(COLI)

# ---- benchmarks ------------------------------------------------------------------
# The scheduler: decode tok/s --inproc vs 1 and 2 local CPU workers, and the
# per-layer dispatch round trip, on a fixture and on the bench-mixtral shape
# (generated with ../shared/reference/gen, 1.2 GiB F16, then Q4_0 by coli quantize).
SHARED   ?= $(if $(COLI_SHARED),$(COLI_SHARED),../shared)
BENCH_PY ?= $(shell [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
BENCH_DIR := $(BUILD)/bench
$(BENCH_DIR)/bench-mixtral-f16.gguf:
	@mkdir -p $(BENCH_DIR)
	$(BENCH_PY) $(SHARED)/reference/gen/make_models.py $(BENCH_DIR) --only bench-mixtral
# (coli is order-only: rebuilding it does not requantize)
$(BENCH_DIR)/bench-mixtral-q4_0.gguf: $(BENCH_DIR)/bench-mixtral-f16.gguf | $(COLI)
	$(COLI) quantize --pure $< $@ Q4_0
$(BENCH_DIR)/bench-mixtral-q8_0.gguf: $(BENCH_DIR)/bench-mixtral-f16.gguf | $(COLI)
	$(COLI) quantize --pure $< $@ Q8_0
# bench-wide: Mixtral 8x7B's widths (4096 / 14336: rows of 8-15 KiB, where bench-mixtral's
# are 0.6-3 KiB), 2 layers, 4 experts, top 2; random weights by gen_model, 0.99 GB in Q4_0.
$(BENCH_DIR)/bench-wide-q4_0.gguf: | $(BUILD)/bin/gen_model
	@mkdir -p $(BENCH_DIR)
	$(BUILD)/bin/gen_model --arch llama --dim 4096 --ffn 14336 --layers 2 --heads 32 --kv-heads 8 \
	  --experts 4 --top-k 2 --vocab 32000 --ctx 4096 --seed 7 --dtype Q4_0 $@
# bench-bigmem: issue 26's shape (dim 2048, 16 layers, 64 experts top 6, Q4_0: 4.8 GiB, 446 MiB of
# experts per token), written by gen_model in a few MiB of memory; then tools/bench/bench_bigmem.sh
# (the disk, unconfined, and inside a memory cgroup: mapped vs the disk tier, two namespace hosts
# (tools/hosts/bigmem_hosts.sh; root + ip netns + a memory cgroup, else one line), llama.cpp via
# LLAMA_BENCH, LLAMA_RPC_SERVER and LLAMA_NOREPACK). BIGMEM_LIMIT, BIGMEM_RAM, BIGMEM_N override.
$(BENCH_DIR)/bench-bigmem-q4_0.gguf: | $(BUILD)/bin/gen_model
	@mkdir -p $(BENCH_DIR)
	$(BUILD)/bin/gen_model --arch llama --dim 2048 --ffn 1408 --layers 16 --heads 16 --kv-heads 4 \
	  --experts 64 --top-k 6 --vocab 32000 --ctx 4096 --seed 26 --dtype Q4_0 $@
.PHONY: bench-bigmem
bench-bigmem: $(COLI) $(BENCH_DIR)/bench-bigmem-q4_0.gguf
	COLI=$(COLI) THREADS=$(BENCH_THREADS) tools/bench/bench_bigmem.sh $(BENCH_DIR)/bench-bigmem-q4_0.gguf
# bench-hosts-ratio: issue 26's two-hosts / in-process ratio, rounds side by side (ROUNDS, N)
.PHONY: bench-hosts-ratio
bench-hosts-ratio: $(COLI) $(WORKER) $(CPU_PLUGIN) $(BENCH_DIR)/bench-bigmem-q4_0.gguf
	COLI=$(COLI) MODEL=$(BENCH_DIR)/bench-bigmem-q4_0.gguf tools/hosts/hosts_vs_inproc.sh
.PHONY: bench-sched
bench-sched: $(COLI) $(WORKER) $(CPU_PLUGIN) $(BUILD)/bin/bench_sched $(BUILD)/bin/bench_ring $(FIXTURES) $(BENCH_DIR)/bench-mixtral-q4_0.gguf
	$(BUILD)/bin/bench_ring 2 4096 2000
	$(BUILD)/bin/bench_ring 16 4096 2000
	$(BUILD)/bin/bench_sched $(BUILD)/fixtures/tiny-llama-moe-f32.gguf 64
	$(BUILD)/bin/bench_sched $(BENCH_DIR)/bench-mixtral-q4_0.gguf 16
# `coli bench` over the standard set (tiny fixture, bench-mixtral Q8_0/Q4_0, bench-wide Q4_0; --inproc
# and local CPU workers, interleaved), then docs/benchmarks.md's generated section and
# chart are rewritten (tools/bench/run_bench.py). BENCH_REPEAT, BENCH_N, BENCH_PROMPTS,
# BENCH_THREADS, BENCH_DEVICES override the defaults.
BENCH_REPEAT  ?= 3
BENCH_N       ?= 128
BENCH_PROMPTS ?= 64,512
BENCH_THREADS ?= 2
BENCH_DEVICES ?= inproc cpu:1
.PHONY: bench-coli bandwidth
bandwidth: $(COLI)
	$(COLI) bench --bandwidth -t 1
	$(COLI) bench --bandwidth -t 2
bench-coli: $(COLI) $(WORKER) $(CPU_PLUGIN) $(FIXTURES) $(BENCH_DIR)/bench-mixtral-q8_0.gguf \
            $(BENCH_DIR)/bench-mixtral-q4_0.gguf $(BENCH_DIR)/bench-wide-q4_0.gguf
	$(BENCH_PY) tools/bench/run_bench.py --coli $(COLI) --out $(BENCH_DIR) \
	  --threads $(BENCH_THREADS) --repeat $(BENCH_REPEAT) -n $(BENCH_N) -p $(BENCH_PROMPTS) \
	  --devices "$(BENCH_DEVICES)" --docs docs/benchmarks.md --chart docs/img/bench-decode.svg \
	  --model tiny-llama-moe=$(BUILD)/fixtures/tiny-llama-moe-f32.gguf \
	  --model bench-mixtral=$(BENCH_DIR)/bench-mixtral-q8_0.gguf \
	  --model bench-mixtral=$(BENCH_DIR)/bench-mixtral-q4_0.gguf \
	  --model bench-wide=$(BENCH_DIR)/bench-wide-q4_0.gguf
# Serving (issue 14): tools/bench/serve_load.py drives `coli serve` (the default devices:
# in-process on a machine without accelerators) with 1/4/8 concurrent streamed requests, with continuous batching and with
# --no-batching; each table replaces its coli-serve section of docs/benchmarks.md.
# BENCH_SERVE_MODEL, _STREAMS, _REQUESTS, _N and _DOCS override the defaults.
BENCH_SERVE_MODEL    ?= $(BENCH_DIR)/bench-mixtral-q4_0.gguf
BENCH_SERVE_STREAMS  ?= 1,4,8
BENCH_SERVE_REQUESTS ?= 2
BENCH_SERVE_N        ?= 64
BENCH_SERVE_DOCS     ?= docs/benchmarks.md
BENCH_SERVE = $(BENCH_PY) tools/bench/serve_load.py --coli $(COLI) --model $(BENCH_SERVE_MODEL) \
  --streams $(BENCH_SERVE_STREAMS) --requests $(BENCH_SERVE_REQUESTS) -n $(BENCH_SERVE_N) \
  --markdown --docs $(BENCH_SERVE_DOCS)
.PHONY: bench-serve
bench-serve: $(COLI) $(WORKER) $(CPU_PLUGIN) $(BENCH_SERVE_MODEL)
	$(BENCH_SERVE) --section batching --serve-args "-t $(BENCH_THREADS)"
	$(BENCH_SERVE) --section no-batching --serve-args "-t $(BENCH_THREADS) --no-batching"
# One benchmark at a time (each sub-make still builds its inputs in parallel): two running
# side by side would measure each other.
bench:
	@for t in bench-coli bench-sched bench-serve; do $(MAKE) --no-print-directory $$t || exit 1; done

# Soak (issue 16; not in CI, see docs/soak.md): tools/soak/soak.py runs coli serve with
# local CPU workers for SOAK_MINUTES under 4 clients (completion, chat, each plain and
# streamed; every reply compared byte for byte with a --inproc reference) while a chaos
# thread SIGKILLs and SIGSTOPs the workers. SOAK_MODEL (default: the bundled model),
# SOAK_MINUTES (10) and SOAK_ARGS (more soak.py flags) override the defaults.
SOAK_MINUTES ?= 10
SOAK_MODEL   ?= $(firstword $(sort $(wildcard models/*.gguf)))
SOAK_ARGS    ?=
.PHONY: soak
soak: $(COLI) $(WORKER) $(CPU_PLUGIN)
	$(BENCH_PY) tools/soak/soak.py --coli $(COLI) --model $(SOAK_MODEL) --minutes $(SOAK_MINUTES) $(SOAK_ARGS)

# ---- tests ---------------------------------------------------------------------
fixtures: $(FIXTURES)
$(FIXTURES): $(BUILD)/bin/gen_model
	@mkdir -p $(dir $@)
	$(BUILD)/bin/gen_model --all $(BUILD)/fixtures
	touch $@

# What only the tests need: promtool (Debian's prometheus, ~100 MB without its
# recommends) checks the /metrics scrape of coli serve. The openai npm client of
# tests/node is installed by its test (npm ci) on first use; so is puppeteer-core,
# which drives Debian's chromium (headless) through coli serve's dashboard.
TEST_PKGS := prometheus chromium
.PHONY: test-deps
# after deps: two apt-get runs at once would fight over dpkg's lock under make -j
test-deps: deps
	$(call apt_install,test-deps,$(TEST_PKGS),--no-install-recommends)

test: deps test-deps
	tools/check_style.sh
	tools/include_graph.py --check
	tools/include_graph.py --self-test
	$(MAKE) all fixtures
	COLI_BUILD=$(BUILD) tests/run.sh $(TESTS)

# The end-to-end tests again under ASan+UBSan, in their own build dir (CI runs it
# after `make test`): the CLI and the library on every fixture, hostile files,
# tokenizers, worker processes, every family's loader on hostile metadata.
SANITIZE_TESTS := test_api test_cli test_gguf test_tokenizer test_scheduler_procs test_prefault test_matmul \
                  test_model_mutations
test-sanitize: deps
	$(MAKE) SANITIZE=1 BUILD=build-asan build-asan/bin/coli build-asan/bin/coli-worker \
	  build-asan/lib/libcoli-cpu.so build-asan/bin/gen_model $(addprefix build-asan/tests/,$(SANITIZE_TESTS))
	$(MAKE) SANITIZE=1 BUILD=build-asan fixtures
	COLI_BUILD=build-asan tests/run.sh $(addprefix build-asan/tests/,$(SANITIZE_TESTS))

# GPU plugins: make CUDA=1 | HIP=1 | gpu-compile (see the file)
include plugins/gpu/gpu.mk
# The XDNA NPU lane: plugin, helper (XRT or the synthetic runtime), package code (see the file)
include plugins/xdna/xdna.mk

# ---- fuzzing (not part of `all`) ----------------------------------------------------
# make fuzz [FUZZ_SECONDS=300] [FUZZ_TARGETS="gguf wire ..."]: libFuzzer + ASan + UBSan, one
# harness after another (one core each), FUZZ_SECONDS each:
#   gguf       the GGUF reader (seeded with small valid files written by tools/fuzz/gguf_seeds.c)
#   wire       protocol messages and frames a worker or coordinator receives (proto/wire.c)
#   ring       the shared-memory ring's slot reader and attach (proto/shm_ring.c)
#   openai     the OpenAI request body parser (tools/coli/server/server_openai.c)
#   template   the chat template renderer (tools/coli/chat/chat_template.c)
#   grammar    the response_format schema compiler and automaton: a few bytes expand into large
#              schemas (enums up to 65535 values, thousands of properties, deep nesting)
#   tokenizer  encode + decode of arbitrary bytes with the bundled vocabulary
# New inputs are kept in $(BUILD)/fuzz/corpus-NAME, crashes land in $(BUILD)/fuzz/NAME-crash-*.
# The library under the harnesses is built with the same sanitizers in $(BUILD)/fuzz/lib
# (a sub-make with BUILD there). Figures: docs/fuzzing.md.
FUZZ_SECONDS ?= 300
FUZZ_TARGETS ?= gguf wire ring openai template grammar tokenizer
FUZZ_PKGS    := clang libclang-rt-14-dev
FUZZ_DIR     := $(BUILD)/fuzz
FUZZ_CFLAGS  := -std=gnu11 -g -O1 -Wall -Wextra -Iinclude -I.
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_LIBDIR  := $(FUZZ_DIR)/lib
FUZZ_LIB     := $(FUZZ_LIBDIR)/lib/libcolibri-internal.a
FUZZ_LIBS    := -lzmq -lprotobuf-c -ldl -lm -lcjson -lmicrohttpd -pthread
FUZZ_SERVER_LIB := $(FUZZ_LIBDIR)/lib/libcoli-server.a
.PHONY: fuzz fuzz-deps fuzz-build $(FUZZ_LIB)
fuzz-deps:
	$(call apt_install,fuzz,$(FUZZ_PKGS))

# Seed files for the GGUF harness (a plain program on the instrumented library).
$(FUZZ_DIR)/gguf_seeds: tools/fuzz/gguf_seeds.c $(FUZZ_LIB) tests/gguf_bytes.h core/gguf/gguf.h
	clang $(FUZZ_CFLAGS) $(FUZZ_SAN) -o $@ tools/fuzz/gguf_seeds.c $(FUZZ_LIB) $(FUZZ_LIBS)

# The whole library and the server library (the harnesses of its parts link it),
# instrumented for the fuzzer (coverage) and the sanitizers.
$(FUZZ_LIB): | fuzz-deps
	$(MAKE) --no-print-directory BUILD=$(FUZZ_LIBDIR) CC=clang OPT=-O1 \
	  SANFLAGS="-fsanitize=fuzzer-no-link $(FUZZ_SAN)" $(FUZZ_LIB) $(FUZZ_SERVER_LIB)
$(FUZZ_SERVER_LIB): $(FUZZ_LIB)

FUZZ_EXTRA_openai   := $(FUZZ_SERVER_LIB)
FUZZ_EXTRA_template := $(FUZZ_SERVER_LIB)
FUZZ_EXTRA_grammar  := $(FUZZ_SERVER_LIB)
$(FUZZ_DIR)/fuzz_%: tools/fuzz/fuzz_%.c $(FUZZ_LIB) $(FUZZ_SERVER_LIB)
	clang $(FUZZ_CFLAGS) -I$(FUZZ_LIBDIR)/gen -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $< $(FUZZ_EXTRA_$*) \
	  $(FUZZ_LIB) $(FUZZ_LIBS)

fuzz-build: $(foreach t,$(FUZZ_TARGETS),$(FUZZ_DIR)/fuzz_$(t)) $(FUZZ_DIR)/gguf_seeds

fuzz: fuzz-build
	@mkdir -p $(FUZZ_DIR)/seeds-gguf
	$(FUZZ_DIR)/gguf_seeds $(FUZZ_DIR)/seeds-gguf
	@st=0; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_DIR)/corpus-$$t; seeds=; \
	  [ -d tools/fuzz/seeds/$$t ] && seeds=tools/fuzz/seeds/$$t; \
	  [ $$t = gguf ] && seeds=$(FUZZ_DIR)/seeds-gguf; \
	  echo "== fuzz_$$t: $(FUZZ_SECONDS) s"; \
	  $(FUZZ_DIR)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
	    -artifact_prefix=$(FUZZ_DIR)/$$t- $(FUZZ_DIR)/corpus-$$t $$seeds || st=1; \
	done; exit $$st

clean:
	rm -rf build build-asan build-*
