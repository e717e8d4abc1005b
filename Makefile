# invar — build, check, run, bench.
#
#   make            build/invar (with CUDA when nvcc is found, CPU-only otherwise)
#   make check      unit tests + kernel checks + the CI matrix (cases/ci.ini)
#   make run        the CI matrix, reports under build/report/run
#   make deps       installs missing libraries with apt-get (as root) or prints the command
#
# Libraries provided another way (the GPU host has no package registry): DEPS_PREFIX=/tmp/deps
# points at a tree made by `dpkg -x` of the Debian packages (see README).

CC       ?= cc
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
BUILD    ?= build
DEPS_PREFIX ?=
CUDA     ?= $(if $(NVCC),1,0)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

# -std=c11 (not gnu11) also turns GCC's default -ffp-contract=fast off: a product and the sum
# it feeds, written as two statements, are never fused into an FMA (kernels/cpu/lanes.h).
CSTD     := -std=c11 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Werror
OPT      ?= -O2 -g
# No -ffast-math anywhere: reassociation would change reduction orders behind our back.
CFLAGS_ALL := $(CSTD) $(WARN) $(OPT) -pthread -MMD -MP
LDLIBS   := -lcsv -lcjson -linih -lxxhash -lm -pthread
DEPS_PKGS := libcmocka-dev libcsv-dev libcjson-dev libinih-dev libxxhash-dev libxml2-utils

ifneq ($(DEPS_PREFIX),)
DEPS_LIBDIR := $(DEPS_PREFIX)/usr/lib/x86_64-linux-gnu
CFLAGS_ALL += -I$(DEPS_PREFIX)/usr/include
LDFLAGS  += -L$(DEPS_LIBDIR) -Wl,-rpath,$(DEPS_LIBDIR)
endif

LIB_SRC := $(wildcard kernels/*.c kernels/cpu/*.c kernels/f64/*.c reference/cpu/*.c \
                      engine/*.c harness/*.c reports/*.c)
LIB_SRC := $(filter-out harness/main.c,$(LIB_SRC))
CU_SRC  := $(wildcard kernels/cuda/*.cu reference/cuda/*.cu)
TEST_SRC := $(wildcard tests/test_*.c)

ifeq ($(CUDA),1)
CFLAGS_ALL += -DINVAR_CUDA -I$(CUDA_HOME)/include
NVFLAGS  := -std=c++17 -O3 -lineinfo -DINVAR_CUDA -MMD -MP \
            -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90 \
            -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CU_SRC:%.cu=$(BUILD)/%.cu.o)
else
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
endif

TESTS := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

.PHONY: all deps check run bench clean tests nightly
all: $(BUILD)/invar

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/libinvar.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/invar: $(BUILD)/harness/main.o $(BUILD)/libinvar.a
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libinvar.a
	$(CC) $(LDFLAGS) $^ -lcmocka $(LDLIBS) -o $@

tests: $(TESTS)

# Installs missing libraries when root; otherwise prints the command. Headers already present
# (system or DEPS_PREFIX) mean nothing to do.
deps:
	@missing=""; \
	for h in cmocka.h csv.h cjson/cJSON.h ini.h xxhash.h; do \
	  if [ ! -f /usr/include/$$h ] && [ ! -f "$(DEPS_PREFIX)/usr/include/$$h" ]; then missing="$$missing $$h"; fi; \
	done; \
	command -v xmllint >/dev/null 2>&1 || [ -n "$(DEPS_PREFIX)" ] || missing="$$missing xmllint"; \
	if [ -n "$$missing" ]; then \
	  echo "deps: missing:$$missing"; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEPS_PKGS) >/dev/null || exit 1; \
	  else \
	    echo "deps: run: sudo apt-get install -y $(DEPS_PKGS)"; exit 1; \
	  fi; \
	fi

check: deps
	@$(MAKE) --no-print-directory all tests
	@PATH="$(if $(DEPS_PREFIX),$(DEPS_PREFIX)/usr/bin:)$$PATH" bash tests/run_all.sh $(BUILD)

run: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/invar run --case cases/ci.ini --out $(BUILD)/report/run

# The nightly matrix into a dated report directory, diffed against the latest earlier one that
# finished (has junit.xml); exit 1 on a failed expectation or a regression.
NIGHTLY_DIR := $(BUILD)/nightly
nightly: deps
	@$(MAKE) --no-print-directory all
	@set -u; new=$(NIGHTLY_DIR)/$$(date -u +%Y%m%dT%H%M%SZ); \
	prev=$$(for d in $(NIGHTLY_DIR)/*/; do [ -f "$$d/junit.xml" ] && echo "$${d%/}"; done 2>/dev/null | sort | tail -n 1); \
	rc=0; $(BUILD)/invar run --case cases/nightly.ini --out "$$new" || rc=$$?; \
	if [ "$$rc" -gt 1 ]; then echo "nightly: invar run failed (exit $$rc)"; exit $$rc; fi; \
	if [ -n "$$prev" ]; then \
	  $(BUILD)/invar report diff "$$prev" "$$new" || { d=$$?; [ "$$rc" -ne 0 ] || rc=$$d; }; \
	else \
	  echo "nightly: no earlier report under $(NIGHTLY_DIR): nothing to diff against"; \
	fi; \
	echo "nightly: report in $$new (exit $$rc)"; exit $$rc

bench: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/invar bench --device cuda --out $(BUILD)/bench

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
