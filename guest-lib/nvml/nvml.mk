# pvgpu's NVML: build/lib/libnvidia-ml.so.1 (DESIGN §1, §8), for pynvml,
# PyTorch's NVML checks and nvidia-smi-style views in the guest.  Included
# by the top-level Makefile.  Its surface is generated from nvml.h by
# protocol/api/gen_nvml.py (libclang, the machinery gen_api.py uses for
# cuda.h); hand-written entries live in guest-lib/nvml/*.c, and
# protocol/api/nvml_annotations.py says which ones those are.
#
# nvml.h: the CUDA toolkit's (the GPU host's /usr/local/cuda has one), else
# NVIDIA's PyPI nvidia-nvml-dev that scripts/install-deps.sh installs.

NVML_INCLUDE ?= $(firstword $(foreach d,$(CUDA_INCLUDE) .deps/nvml-py/nvidia/cu13/include,\
	$(if $(wildcard $(d)/nvml.h),$(d))))
LIBNVML      = $(BUILD)/lib/libnvidia-ml.so.1
NVML_API_GEN = $(addprefix $(GEN_DIR)/,nvml_surface.c libnvidia-ml.map nvml-coverage.md)
LIBNVML_SRC  = $(wildcard guest-lib/nvml/*.c) $(GEN_DIR)/nvml_surface.c $(CLIENT_SRC)

$(NVML_API_GEN) &: protocol/api/gen_nvml.py protocol/api/header.py protocol/api/nvml_annotations.py $(wildcard protocol/api/libnvidia-ml*.nm)
	python3 protocol/api/gen_nvml.py $(NVML_INCLUDE) $(GEN_DIR)

$(OBJ_DIR)/guest-lib/nvml/%.o $(OBJ_DIR)/gen/nvml_surface.o: CFLAGS += -Iguest-lib/nvml -I$(NVML_INCLUDE)
$(OBJ_DIR)/gen/nvml_surface.o: $(NVML_API_GEN)

$(LIBNVML): $(call objs,$(LIBNVML_SRC)) $(GEN_DIR)/libnvidia-ml.map
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libnvidia-ml.so.1 \
		-Wl,--version-script=$(GEN_DIR)/libnvidia-ml.map -Wl,-z,defs \
		-o $@ $(call objs,$(LIBNVML_SRC)) $(LDLIBS)

# Without libclang or nvml.h, make leaves libnvidia-ml.so.1 out and says so.
ifeq ($(HAVE_LIBCLANG),1)
ifneq ($(NVML_INCLUDE),)
all: $(LIBNVML)
else
all: libnvml-missing
.PHONY: libnvml-missing
libnvml-missing:
	@echo "make: no nvml.h (scripts/install-deps.sh installs nvidia-nvml-dev): leaving out $(LIBNVML)"
endif
else
all: libnvml-missing
.PHONY: libnvml-missing
libnvml-missing:
	@echo "make: python3 has no libclang (pip install libclang): leaving out $(LIBNVML)"
endif
