# plugins/gpu/gpu.mk - the GPU expert plugins (included by the Makefile).
#
#   make CUDA=1 [CUDA_ARCH="80 90"]  also builds $(BUILD)/lib/libcoli-cuda.so (nvcc; the CUDA
#                                    runtime linked statically: the machine needs the driver only)
#   make HIP=1 [HIP_ARCH=gfx1030]    also builds $(BUILD)/lib/libcoli-hip.so (Debian's hipcc)
#   make gpu-compile                 both plugins under $(BUILD)/gpu/{cuda,hip}/, nothing run;
#                                    installs hipcc first when missing (make deps-hip)
#   make test                        runs gpu-compile-auto first: compiles whichever plugin has
#                                    its toolchain here or installable (GPU_COMPILE=0: skip)
# CUDA=1 and HIP=1 exclude each other; the default build needs neither toolkit.
# One source for both vendors: plugins/gpu/gpu_experts.cu (+ gpu_compat.h, the only place
# with vendor differences). docs/gpu.md has the rest.

CUDA        ?= 0
HIP         ?= 0
ifeq ($(CUDA)$(HIP),11)
$(error CUDA=1 and HIP=1 are mutually exclusive (use two BUILD dirs, or make gpu-compile))
endif
NVCC        ?= $(firstword $(shell command -v nvcc 2>/dev/null) /usr/local/cuda/bin/nvcc)
HIPCC       ?= hipcc
CUDA_ARCH   ?= 80 90
HIP_ARCH    ?= gfx1030
GPU_COMPILE ?= auto
HIP_PKGS    := hipcc libamdhip64-dev

GPU_DIR      := $(BUILD)/gpu
GPU_SRC      := plugins/gpu/gpu_experts.cu
GPU_HDRS     := $(wildcard plugins/gpu/*.h plugins/gpu/*.cuh) plugins/plugin_abi.h core/tensor.h core/expert_table.h
# the host-side C: gpu_host.c, the expert table it shares with the other plugins and the IQ
# grids it uploads (core/)
GPU_GRID_SRC := $(wildcard core/quant/quant_tables_iq*.c)
GPU_HOST_OBJ := $(GPU_DIR)/gpu_host.o $(GPU_DIR)/expert_table.o \
                $(patsubst core/quant/%.c,$(GPU_DIR)/%.o,$(GPU_GRID_SRC))
CUDA_SO      := $(GPU_DIR)/cuda/libcoli-cuda.so
HIP_SO       := $(GPU_DIR)/hip/libcoli-hip.so

# A fat binary: SASS for every listed arch, plus PTX of the last one so newer GPUs can JIT it.
CUDA_LAST    := $(lastword $(CUDA_ARCH))
NVCC_GENCODE := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
                -gencode arch=compute_$(CUDA_LAST),code=compute_$(CUDA_LAST)
NVCC_FLAGS   := -std=c++17 -O2 -Xcompiler -fPIC,-Wall,-Wextra,-Wno-unused-parameter \
                -I. -Iinclude
HIPCC_FLAGS  := -x hip -std=c++17 -O2 -fPIC -Wall -Wextra -Wno-unused-parameter \
                $(foreach a,$(HIP_ARCH),--offload-arch=$(a)) -I. -Iinclude
GPU_HOST_CFLAGS := -std=gnu11 -O2 -g -Wall -Wextra -fPIC -Iinclude -I.

$(GPU_DIR)/gpu_host.o: plugins/gpu/gpu_host.c plugins/gpu/gpu_host.h include/colibri.h core/quant/quant_blocks.h
	@mkdir -p $(dir $@)
	$(CC) $(GPU_HOST_CFLAGS) -c $< -o $@

$(GPU_DIR)/quant_tables_%.o: core/quant/quant_tables_%.c core/quant/quant_blocks.h
	@mkdir -p $(dir $@)
	$(CC) $(GPU_HOST_CFLAGS) -c $< -o $@

$(GPU_DIR)/expert_table.o: core/expert_table.c core/expert_table.h include/colibri.h
	@mkdir -p $(dir $@)
	$(CC) $(GPU_HOST_CFLAGS) -c $< -o $@

$(GPU_DIR)/cuda/gpu_experts.o: $(GPU_SRC) $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_GENCODE) -c $< -o $@

$(CUDA_SO): $(GPU_DIR)/cuda/gpu_experts.o $(GPU_HOST_OBJ) plugins/plugin.map
	$(NVCC) -shared -cudart static -Xlinker --version-script=plugins/plugin.map \
	  -o $@ $(GPU_DIR)/cuda/gpu_experts.o $(GPU_HOST_OBJ) -ldl -lrt -lpthread

$(GPU_DIR)/hip/gpu_experts.o: $(GPU_SRC) $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(HIPCC) $(HIPCC_FLAGS) -c $< -o $@

$(HIP_SO): $(GPU_DIR)/hip/gpu_experts.o $(GPU_HOST_OBJ) plugins/plugin.map
	$(HIPCC) -shared -fPIC $(foreach a,$(HIP_ARCH),--offload-arch=$(a)) -Wl,--version-script=plugins/plugin.map \
	  -o $@ $(GPU_DIR)/hip/gpu_experts.o $(GPU_HOST_OBJ)

$(BUILD)/lib/libcoli-cuda.so: $(CUDA_SO)
	@mkdir -p $(dir $@)
	cp $< $@

$(BUILD)/lib/libcoli-hip.so: $(HIP_SO)
	@mkdir -p $(dir $@)
	cp $< $@

ifeq ($(CUDA),1)
all: $(BUILD)/lib/libcoli-cuda.so
endif
ifeq ($(HIP),1)
all: $(BUILD)/lib/libcoli-hip.so
endif

.PHONY: gpu-compile gpu-compile-auto deps-hip
# Debian's hipcc without recommends: ~66 MB download, ~350 MB installed (clang-15, ROCm libs).
deps-hip:
	$(call apt_install,deps-hip,$(HIP_PKGS),--no-install-recommends)

gpu-compile: deps-hip
	@command -v $(NVCC) >/dev/null || { echo "gpu-compile: nvcc not found ($(NVCC)); install the CUDA toolkit or set NVCC=" >&2; exit 1; }
	$(MAKE) $(CUDA_SO) $(HIP_SO)
	@echo "gpu-compile: built $(CUDA_SO) (sm: $(CUDA_ARCH)) and $(HIP_SO) ($(HIP_ARCH))"

# What `make test` does: compile each plugin whose toolchain is here (hipcc also when it can
# be installed: root with apt-get), say plainly which one is skipped and why.
gpu-compile-auto: deps
	@if command -v $(NVCC) >/dev/null; then $(MAKE) --no-print-directory $(CUDA_SO); \
	else echo "gpu-compile: CUDA plugin skipped: nvcc not found ($(NVCC))"; fi
	@if command -v $(HIPCC) >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; }; then \
	  $(MAKE) --no-print-directory deps-hip && $(MAKE) --no-print-directory $(HIP_SO); \
	else echo "gpu-compile: HIP plugin skipped: hipcc not found and not installable here (needs root + apt-get)"; fi

ifneq ($(GPU_COMPILE),0)
test: gpu-compile-auto
endif

# The kernels run on the host under gpu_emu.h (C++: the kernels are templates); part of `all`
# and of `make test`, no toolkit needed.
GPU_EMU_TEST := $(BUILD)/tests/test_gpu_emu
$(GPU_EMU_TEST): tests/test_gpu_emu.cpp $(GPU_HDRS) tests/gpu_test_util.h $(LIB)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O1 -g -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Wno-unknown-pragmas \
	  $(SANFLAGS) -pthread -Iinclude -I. -o $@ $< $(LDFLAGS) $(LIB) $(LDLIBS) -lcriterion
all: $(GPU_EMU_TEST)
TESTS += $(GPU_EMU_TEST)
