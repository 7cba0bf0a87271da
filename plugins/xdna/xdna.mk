# plugins/xdna/xdna.mk - the XDNA NPU lane (included by the Makefile). docs/xdna.md has the rest.
#
#   make                       builds $(BUILD)/lib/libcoli-xdna.so (pure C, no XRT in NEEDED) and,
#                              for the tests, the helper against the synthetic XRT runtime under
#                              $(BUILD)/xdna/synth/ (never beside the plugin: a default build has
#                              no helper there, so the lane says HELPER_UNAVAILABLE)
#   make XDNA=1 XRT_ROOT=/opt/xilinx/xrt
#                              also builds $(BUILD)/lib/libcoli-xdna-helper.so against that XRT
#                              (>= 2.18 with the amdxdna driver; not in Debian 12)
# SHA-256 comes from libsodium (libsodium-dev).

XDNA        ?= 0
XRT_ROOT    ?= /opt/xilinx/xrt
CXX         ?= g++
XDNA_DIR    := $(BUILD)/xdna
XDNA_PLUGIN := $(BUILD)/lib/libcoli-xdna.so
XDNA_SRC    := plugins/xdna/xdna_plugin.c plugins/xdna/xdna_loader.c plugins/xdna/xdna_package.c
XDNA_OBJ    := $(call obj,$(XDNA_SRC))
XDNA_PKG_OBJ := $(call obj,plugins/xdna/xdna_package.c)
XDNA_HDRS   := plugins/xdna/xdna_helper_abi.h
XDNA_SYNTH_INC := plugins/xdna/xrt_synth/include
XDNA_SYNTH_HDRS := $(shell find $(XDNA_SYNTH_INC) -name '*.h')
XDNA_SYNTH_DIR := $(XDNA_DIR)/synth
XDNA_SYNTH_LIB := $(XDNA_SYNTH_DIR)/libxrt_coreutil.so
XDNA_CXXFLAGS := -std=c++17 -O2 -g -Wall -Wextra -fPIC -fvisibility=hidden -I.
# the helper variants the tests use: the real source against the synthetic XRT; one that
# reports ABI generation 1; one without coli_xdna_last_error
XDNA_TEST_HELPERS := $(XDNA_SYNTH_DIR)/libcoli-xdna-helper.so $(XDNA_DIR)/abi1/libcoli-xdna-helper.so \
                     $(XDNA_DIR)/nosym/libcoli-xdna-helper.so

DEB_PKGS += libsodium-dev
LDLIBS   += -lsodium
# for coli xdna check, the package builder and the tests: the package code and the loader (only
# what uses them needs -lsodium; the coordinator's opt-in is core/settings.c's COLI_XDNA)
$(LIB): $(XDNA_PKG_OBJ) $(call obj,plugins/xdna/xdna_loader.c)

$(XDNA_PLUGIN): $(XDNA_OBJ) $(CORE_OBJ) plugins/plugin.map
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -Wl,--version-script=plugins/plugin.map -o $@ $(XDNA_OBJ) $(CORE_OBJ) -lsodium -ldl -lm

$(XDNA_SYNTH_LIB): plugins/xdna/xrt_synth/xrt_synth.cpp $(XDNA_SYNTH_HDRS)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -g -Wall -Wextra -fPIC -I$(XDNA_SYNTH_INC) -shared -Wl,-soname,libxrt_coreutil.so \
	  -o $@ $< -pthread

# $(1): output, $(2): extra flags
define xdna_synth_helper
$(1): plugins/xdna/xdna_helper.cpp $(XDNA_HDRS) $(XDNA_SYNTH_HDRS) $(XDNA_SYNTH_LIB)
	@mkdir -p $$(dir $$@)
	$(CXX) $(XDNA_CXXFLAGS) $(2) -I$(XDNA_SYNTH_INC) -shared -o $$@ $$< -L$(XDNA_SYNTH_DIR) -lxrt_coreutil \
	  -Wl,-rpath,$(abspath $(XDNA_SYNTH_DIR)) -pthread
endef
$(eval $(call xdna_synth_helper,$(XDNA_SYNTH_DIR)/libcoli-xdna-helper.so,))
$(eval $(call xdna_synth_helper,$(XDNA_DIR)/abi1/libcoli-xdna-helper.so,-DXDNA_HELPER_REPORTED_ABI=1))
$(eval $(call xdna_synth_helper,$(XDNA_DIR)/nosym/libcoli-xdna-helper.so,-DXDNA_HELPER_OMIT_LAST_ERROR))

# the real helper: the same source against an installed XRT
$(BUILD)/lib/libcoli-xdna-helper.so: plugins/xdna/xdna_helper.cpp $(XDNA_HDRS)
	@mkdir -p $(dir $@)
	$(CXX) $(XDNA_CXXFLAGS) -I$(XRT_ROOT)/include -shared -o $@ $< -L$(XRT_ROOT)/lib -lxrt_coreutil \
	  -Wl,-rpath,$(XRT_ROOT)/lib -pthread

all: $(XDNA_PLUGIN) $(XDNA_TEST_HELPERS)
ifeq ($(XDNA),1)
all: $(BUILD)/lib/libcoli-xdna-helper.so
endif
