# invar — build, check, run, bench.
#
#   make            build/invar (with CUDA where nvcc is found and nvidia-smi lists a GPU,
#                   CPU-only otherwise; CUDA=1 or CUDA=0 decides)
#   make check      unit tests + kernel checks + the CI matrix (cases/ci.ini); where nvcc is but
#                   the build is CPU-only, the CUDA build is compiled too, as one suite
#   make run        the CI matrix, reports under build/report/run
#   make deps       installs missing libraries with apt-get (as root) or prints the command
#
# Libraries provided another way (the GPU host has no package registry): DEPS_PREFIX=/tmp/deps
# points at a tree made by `dpkg -x` of the Debian packages (see README).

CC       ?= cc
comma    := ,
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
BUILD    ?= build
DEPS_PREFIX ?=
# Without a GPU the CUDA build only costs time (minutes of nvcc before a first run): CUDA=1 asks
# for it anyway, and `make check` still compiles it as a suite wherever nvcc is.
HAVE_GPU := $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU' && echo 1)
CUDA     ?= $(if $(and $(NVCC),$(HAVE_GPU)),1,0)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

# -std=c11 (not gnu11) also turns GCC's default -ffp-contract=fast off: a product and the sum
# it feeds, written as two statements, are never fused into an FMA (kernels/cpu/lanes.h).
CSTD     := -std=c11 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Werror
OPT      ?= -O2 -g
# No -ffast-math anywhere: reassociation would change reduction orders behind our back.
# -fPIC: the same objects make build/invar and build/libinvar.so (the Python bridge loads it).
# _FORTIFY_SOURCE=3 wherever optimising, as Ubuntu's gcc (the GPU host's) turns it on by
# default: an overflow it traps there must be trapped in CI too.
FORTIFY  := $(if $(filter -O1 -O2 -O3 -Os,$(OPT)),-U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=3)
CFLAGS_ALL := $(CSTD) $(WARN) $(OPT) $(FORTIFY) -pthread -MMD -MP -fPIC
LDLIBS   := -lcsv -lcjson -linih -lxxhash -lmicrohttpd -lcurl -lm -pthread
DEPS_PKGS := libcmocka-dev libcsv-dev libcjson-dev libinih-dev libxxhash-dev libxml2-utils \
             libmicrohttpd-dev libcurl4-openssl-dev python3-numpy

ifneq ($(DEPS_PREFIX),)
DEPS_LIBDIR := $(DEPS_PREFIX)/usr/lib/x86_64-linux-gnu
CFLAGS_ALL += -I$(DEPS_PREFIX)/usr/include -I$(DEPS_PREFIX)/usr/include/x86_64-linux-gnu
LDFLAGS  += -L$(DEPS_LIBDIR) -Wl,-rpath,$(DEPS_LIBDIR)
# libcurl's own dependencies a bare host may lack (libssh2, libldap, ...): a few Debian
# packages still install under /lib. DT_RPATH, not RUNPATH: only RPATH also serves the
# libraries' own dependencies (libcurl's libssh2) at run time.
LDFLAGS  += -Wl,-rpath,$(DEPS_PREFIX)/lib/x86_64-linux-gnu -Wl,--disable-new-dtags
endif

LIB_SRC := $(wildcard common/*.c sets/*.c kernels/*.c kernels/cpu/*.c kernels/f64/*.c reference/cpu/*.c \
                      adversarial/cpu/*.c engine/*.c $(shell find harness -name '*.c') reports/*.c)
LIB_SRC := $(filter-out harness/main.c,$(LIB_SRC))
CU_SRC  := $(wildcard kernels/cuda/*.cu reference/cuda/*.cu adversarial/cuda/*.cu)
TEST_SRC := $(wildcard tests/test_*.c)

ifeq ($(CUDA),1)
CFLAGS_ALL += -DINVAR_CUDA -I$(CUDA_HOME)/include
NVFLAGS  := -std=c++17 -O3 -lineinfo -DINVAR_CUDA -MMD -MP -Xcompiler -fPIC \
            -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90 \
            -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings
# NVCC_DEFINES: a kernel experiment's compile-time choices (e.g. -DGEMM_CP_ASYNC_STAGES=8); a
# change recompiles every .cu (the flag stamps below), so a BUILD folder of its own keeps both
# builds. They change speed, not bits, except -DMLA_SPLIT_SIZE=N, which changes the tree every
# attention row follows (never its invariance).
NVFLAGS  += $(NVCC_DEFINES)
# NCCL (tensor parallelism on CUDA) is required with CUDA: nccl.h and libnccl under CUDA_HOME
# (or NCCL_HOME, or the system's include and library paths, as Debian's libnccl-dev puts them).
NCCL_HOME ?= $(CUDA_HOME)
NCCL_H := $(firstword $(wildcard $(NCCL_HOME)/include/nccl.h /usr/include/nccl.h))
ifeq ($(NCCL_H),)
$(error CUDA=1 needs NCCL for tensor parallelism on GPUs: no nccl.h under $(NCCL_HOME)/include or /usr/include. Set NCCL_HOME=DIR (DIR/include/nccl.h, DIR/lib64 or DIR/lib/libnccl.so), or build CPU-only with CUDA=0)
endif
NCCL_INC := $(patsubst %/nccl.h,%,$(NCCL_H))
NCCL_LIBDIR := $(firstword $(wildcard $(NCCL_HOME)/lib64/libnccl.so $(NCCL_HOME)/lib/libnccl.so $(NCCL_HOME)/lib/x86_64-linux-gnu/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so))
NCCL_LIBDIR := $(patsubst %/libnccl.so,%,$(NCCL_LIBDIR))
ifneq ($(NCCL_INC),/usr/include)
CFLAGS_ALL += -I$(NCCL_INC)
NVFLAGS  += -I$(NCCL_INC)
endif
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 $(if $(NCCL_LIBDIR),-L$(NCCL_LIBDIR) -Wl$(comma)-rpath$(comma)$(NCCL_LIBDIR)) -lnccl -lcublasLt -lcublas -lcudart -lstdc++
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CU_SRC:%.cu=$(BUILD)/%.cu.o)
else
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
endif

# Flags are dependencies: every object names the stamp of the command line that compiles it, and
# a stamp is rewritten only when that line differs from the one it holds, so CUDA=1 over a CPU
# build, another OPT or other NVCC_DEFINES recompile what they change (a build that kept objects
# of the old flags would link a CUDA binary whose C side says "built without CUDA", or file a
# bench run under defines its kernels lack). Read at parse time, so `make -n` and `make -q` tell
# the truth and write nothing.
CFLAGS_LINE := $(strip $(CC) $(CFLAGS_ALL))
NVFLAGS_LINE := $(strip $(NVCC) $(NVFLAGS))
ifneq ($(file <$(BUILD)/cflags.stamp),$(CFLAGS_LINE))
$(BUILD)/cflags.stamp: FORCE
endif
ifneq ($(file <$(BUILD)/nvflags.stamp),$(NVFLAGS_LINE))
$(BUILD)/nvflags.stamp: FORCE
endif
$(BUILD)/cflags.stamp:
	@mkdir -p $(dir $@)
	@printf '%s\n' '$(CFLAGS_LINE)' >$@
$(BUILD)/nvflags.stamp:
	@mkdir -p $(dir $@)
	@printf '%s\n' '$(NVFLAGS_LINE)' >$@

TESTS := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
# One fuzz target per input parser (tests/fuzz/NAME.c, seeds in tests/fuzz/NAME/corpus, saved
# reproducers in tests/fuzz/NAME/crashes); each also links into a plain replay driver.
FUZZ_NAMES := $(filter-out replay,$(basename $(notdir $(wildcard tests/fuzz/*.c))))
FUZZ_REPLAY := $(FUZZ_NAMES:%=$(BUILD)/fuzz/replay_%)

.PHONY: all deps check run bench bench-page clean tests nightly sanitize fuzz gpu-sanitize mutants
all: $(BUILD)/invar $(BUILD)/libinvar.so

$(BUILD)/%.o: %.c $(BUILD)/cflags.stamp
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# The source tree this build comes from (common/source_id.h): its own git checkout's HEAD, with
# -dirty when tracked files differ; "unknown" when the tree is no checkout of its own (a copy
# inside another repository must not take that repository's commit). The stamp changes only
# when the id does, so source_id.o is rebuilt then and only then.
SOURCE_TOP := $(shell git rev-parse --show-toplevel 2>/dev/null)
ifeq ($(SOURCE_TOP),$(realpath $(CURDIR)))
SOURCE_ID := $(shell git rev-parse HEAD 2>/dev/null)$(shell git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo -dirty)
endif
SOURCE_ID := $(if $(SOURCE_ID),$(SOURCE_ID),unknown)
# The experiment defines a CUDA build was made with go into meta.csv beside the commit.
BUILD_DEFINES := $(if $(filter 1,$(CUDA)),$(strip $(NVCC_DEFINES)))
$(BUILD)/source_id.stamp: FORCE
	@mkdir -p $(dir $@)
	@echo '$(SOURCE_ID) $(BUILD_DEFINES)' | cmp -s - $@ || echo '$(SOURCE_ID) $(BUILD_DEFINES)' >$@
$(BUILD)/common/source_id.o: $(BUILD)/source_id.stamp
$(BUILD)/common/source_id.o: CFLAGS_ALL += -DINVAR_SOURCE_ID='"$(SOURCE_ID)"' -DINVAR_BUILD_DEFINES='"$(BUILD_DEFINES)"'
.PHONY: FORCE
FORCE:

$(BUILD)/%.cu.o: %.cu $(BUILD)/nvflags.stamp
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

# The warp-specialized kernels' files keep ptxas's report beside their object (OBJ.ptxas), which
# tests/ptxas_budgets.sh reads instead of compiling them again (minutes of nvcc on a GPU host's
# check); printed only when the compile fails.
PTXAS_REPORTED := kernels/cuda/gemm_sm90.cu kernels/cuda/mla_absorbed_h16_sm90.cu
$(PTXAS_REPORTED:%.cu=$(BUILD)/%.cu.o): $(BUILD)/%.cu.o: %.cu $(BUILD)/nvflags.stamp
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -Xptxas -v -c $< -o $@ 2>$@.ptxas || { cat $@.ptxas; rm -f $@; exit 1; }

$(BUILD)/libinvar.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# OPT on the link lines too: a sanitizer build (make sanitize) must link its runtime.
$(BUILD)/invar: $(BUILD)/harness/main.o $(BUILD)/libinvar.a
	$(CC) $(OPT) $(LDFLAGS) $^ $(LDLIBS) -o $@

# Every object but main's, for programs that link invar (harness/invar_lib.h: the Python bridge).
$(BUILD)/libinvar.so: $(LIB_OBJ)
	$(CC) $(OPT) -shared $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libinvar.a
	$(CC) $(OPT) $(LDFLAGS) $^ -lcmocka $(LDLIBS) -o $@

$(BUILD)/fuzz/replay_%: $(BUILD)/tests/fuzz/%.o $(BUILD)/tests/fuzz/replay.o $(BUILD)/libinvar.a
	@mkdir -p $(dir $@)
	$(CC) $(OPT) $(LDFLAGS) $^ $(LDLIBS) -o $@

# libFuzzer binaries: only in the clang build of `make fuzz` (OPT carries the sanitizers).
$(BUILD)/fuzz/fuzz_%: $(BUILD)/tests/fuzz/%.o $(BUILD)/libinvar.a
	@mkdir -p $(dir $@)
	$(CC) $(OPT) -fsanitize=fuzzer $(LDFLAGS) $^ $(LDLIBS) -o $@

# The plugin ABI's test plugins (tests/plugins/test_plugin.c): one shared object per variant.
TEST_PLUGINS := rmsnorm_invariant rmsnorm_unclaimed rmsnorm_split_small rmsnorm_split_small_honest mixed crash \
                rmsnorm_fails_d512 rmsnorm_nan_batched rmsnorm_nan_long_rows logprobs_rank_off \
                bad_abi_version bad_abi_unset bad_null_table bad_device bad_claim create_fails no_entry
TEST_PLUGIN_SO := $(TEST_PLUGINS:%=$(BUILD)/plugins/%.so)

$(BUILD)/plugins/%.so: tests/plugins/test_plugin.c $(BUILD)/cflags.stamp
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -fPIC -shared -DTEST_PLUGIN_$* $< -o $@ -lm

# CUDA plugins (tests/plugins/cuda_plugin.cu): on its stream, and on the default stream (races).
ifeq ($(CUDA),1)
TEST_PLUGIN_SO += $(BUILD)/plugins/cuda_rmsnorm_stream.so $(BUILD)/plugins/cuda_rmsnorm_default_stream.so
$(BUILD)/plugins/cuda_%.so: tests/plugins/cuda_plugin.cu
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++20 -O2 -shared -cudart shared -Xcompiler -fPIC,-Wall,-Wextra,-Werror -Werror all-warnings \
	  -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90 \
	  -DTEST_PLUGIN_cuda_$* $< -o $@
endif

tests: $(TESTS) $(FUZZ_REPLAY) $(TEST_PLUGIN_SO)

# Installs missing libraries when root; otherwise prints the command. Headers already present
# (system or DEPS_PREFIX) mean nothing to do.
deps:
	@missing=""; \
	for h in cmocka.h csv.h cjson/cJSON.h ini.h xxhash.h microhttpd.h x86_64-linux-gnu/curl/curl.h; do \
	  if [ ! -f /usr/include/$$h ] && [ ! -f "$(DEPS_PREFIX)/usr/include/$$h" ]; then missing="$$missing $$h"; fi; \
	done; \
	command -v xmllint >/dev/null 2>&1 || [ -n "$(DEPS_PREFIX)" ] || missing="$$missing xmllint"; \
	{ [ -n "$(DEPS_PREFIX)" ] || [ ! -x /usr/bin/python3 ] || /usr/bin/python3 -c 'import numpy' 2>/dev/null; } || \
	  missing="$$missing numpy"; \
	if [ -n "$$missing" ]; then \
	  echo "deps: missing:$$missing"; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEPS_PKGS) >/dev/null || exit 1; \
	  else \
	    echo "deps: run: sudo apt-get install -y $(DEPS_PKGS)"; exit 1; \
	  fi; \
	fi

# CHECK_CUDA_BUILD: where run_all.sh compiles the CUDA build as a suite of its own, when this
# build is CPU-only and nvcc is here (the build directory of `make CUDA=1` in CI without a GPU).
CHECK_CUDA_BUILD ?= $(if $(and $(NVCC),$(filter 0,$(CUDA))),build-cuda)
check: deps
	@$(MAKE) --no-print-directory all tests
	@PATH="$(if $(DEPS_PREFIX),$(DEPS_PREFIX)/usr/bin:)$$PATH" CHECK_CUDA_BUILD="$(CHECK_CUDA_BUILD)" \
	  bash tests/run_all.sh $(BUILD)

# The CPU path under AddressSanitizer + UndefinedBehaviorSanitizer, in its own build directory
# (CUDA=0): the unit tests and the smoke case. -fno-sanitize-recover turns any report into a
# failure; -O1 keeps gcc's object-size and format checks of an optimised build.
SANITIZE_BUILD ?= build-sanitize
SANITIZE_OPT := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
sanitize: deps
	@$(MAKE) --no-print-directory CUDA=0 BUILD=$(SANITIZE_BUILD) OPT="$(SANITIZE_OPT)" all tests
	@bash tests/run_sanitize.sh $(SANITIZE_BUILD)

# compute-sanitizer (memcheck, racecheck, synccheck, initcheck; GPU_SANITIZE_TOOLS picks) over
# the CUDA unit tests and `invar kernels --device cuda --quick --set invariant`; reports inside
# cuBLAS's own kernels are left out of the verdict by name (tests/gpu_sanitize.sh says which and
# why). A visible SKIP without a CUDA device.
GPU_SANITIZE_TOOLS ?= memcheck racecheck synccheck initcheck
gpu-sanitize: deps
	@$(MAKE) --no-print-directory all tests
	@bash tests/gpu_sanitize.sh $(BUILD) $(GPU_SANITIZE_TOOLS)

# Each fuzz target for FUZZ_SECONDS seconds (clang's libFuzzer with ASan+UBSan, CUDA=0, in
# FUZZ_BUILD), from the committed seeds; new inputs go to FUZZ_BUILD/corpus/NAME, a crash to
# tests/fuzz/NAME/crashes/ (commit it with its fix: `make check` replays it from then on).
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_OPT := -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
            -fno-sanitize-recover=all
fuzz: deps
	@command -v $(FUZZ_CC) >/dev/null || { echo "fuzz: $(FUZZ_CC) not found (Debian: clang)"; exit 1; }
	@$(MAKE) --no-print-directory CC=$(FUZZ_CC) CUDA=0 BUILD=$(FUZZ_BUILD) OPT="$(FUZZ_OPT)" \
	  $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz/fuzz_%)
	@set -e; for t in $(FUZZ_NAMES); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t tests/fuzz/$$t/crashes; \
	  echo "=== fuzz $$t: $(FUZZ_SECONDS) s"; \
	  $(FUZZ_BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	    -print_final_stats=1 -artifact_prefix=tests/fuzz/$$t/crashes/ \
	    $(FUZZ_BUILD)/corpus/$$t tests/fuzz/$$t/corpus 2>$(FUZZ_BUILD)/fuzz_$$t.log \
	    || { tail -n 40 $(FUZZ_BUILD)/fuzz_$$t.log; echo "fuzz: $$t found a crash (tests/fuzz/$$t/crashes/)"; exit 1; }; \
	  grep -E '^stat::number_of_executed_units|^Done' $(FUZZ_BUILD)/fuzz_$$t.log || true; \
	done

# The mutation suite (tests/mutants/run.sh): each patch planted in a scratch copy under
# build-mutants/, rebuilt, and checked cheapest first; MUTANTS=a,b picks some, MUTANTS_FRESH=1
# judges again those already judged.
MUTANTS ?=
mutants: deps
	@MUTANTS="$(MUTANTS)" bash tests/mutants/run.sh

run: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/invar run --case cases/ci.ini --out $(BUILD)/report/run

# The nightly matrix into a dated report directory, diffed against the latest earlier one that
# finished (has junit.xml); exit 1 on a failed expectation or a regression. First the kernel
# checker's exhaustive mode on the CPU (both sides of every size threshold: shapes and batch
# sizes `make check` leaves out to stay fast); its kernels.csv goes into the same directory.
# Then cases/large.ini (the sizes a real model reaches) into large/, and every CPU kernel mutant
# that `invar kernels` catches checked to be caught by cases/ci.ini too
# (tests/ci_catches_kernel_mutants.sh, its scratch copies under ci-mutants/).
NIGHTLY_DIR := $(BUILD)/nightly
nightly: deps
	@$(MAKE) --no-print-directory all
	@set -u; new=$(NIGHTLY_DIR)/$$(date -u +%Y%m%dT%H%M%SZ); \
	prev=$$(for d in $(NIGHTLY_DIR)/*/; do [ -f "$$d/junit.xml" ] && echo "$${d%/}"; done 2>/dev/null | sort | tail -n 1); \
	rc=0; $(BUILD)/invar kernels --device cpu --exhaustive --out "$$new/kernels" || rc=$$?; \
	if [ "$$rc" -gt 1 ]; then echo "nightly: invar kernels failed (exit $$rc)"; exit $$rc; fi; \
	$(BUILD)/invar run --case cases/nightly.ini --out "$$new" || { r=$$?; [ "$$r" -le "$$rc" ] || rc=$$r; }; \
	$(BUILD)/invar run --case cases/large.ini --out "$$new/large" || { r=$$?; [ "$$r" -le "$$rc" ] || rc=$$r; }; \
	$(BUILD)/invar run --case cases/gpu-v3.ini --out "$$new/gpu-v3" || { r=$$?; [ "$$r" -le "$$rc" ] || rc=$$r; }; \
	$(BUILD)/invar run --case cases/gpu.ini --cuda-graphs on --out "$$new/gpu-graphs" || { r=$$?; [ "$$r" -le "$$rc" ] || rc=$$r; }; \
	if [ "$$rc" -gt 1 ]; then echo "nightly: invar run failed (exit $$rc)"; exit $$rc; fi; \
	bash tests/ci_catches_kernel_mutants.sh "$$new/ci-mutants" || { r=$$?; [ "$$r" -le "$$rc" ] || rc=$$r; }; \
	if [ -n "$$prev" ]; then \
	  $(BUILD)/invar report diff "$$prev" "$$new" || { d=$$?; [ "$$rc" -ne 0 ] || rc=$$d; }; \
	else \
	  echo "nightly: no earlier report under $(NIGHTLY_DIR): nothing to diff against"; \
	fi; \
	echo "nightly: report in $$new (exit $$rc)"; exit $$rc

bench: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/invar bench --device cuda --out $(BUILD)/bench

# The bench results page, kernels/cuda/BENCH.md, from the runs filed in results/bench/;
# BENCH_RUN=DIR files the run in DIR first (`make bench-page BENCH_RUN=build/bench` after
# `make bench`), as results/bench/<date>_<device>_<commit>/.
BENCH_RUN ?=
bench-page: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/invar report bench results/bench $(if $(BENCH_RUN),--add $(BENCH_RUN)) --out kernels/cuda/BENCH.md

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
