// Both emulators' bf16 pieces: the ops shim's scalar type and the attention shim's pairs.
#pragma once
#include "cuda_runtime.h"
#include "../../cuda_emu/shim/cuda_bf16.h"
#include "../../cuda_emu_ops/shim/cuda_bf16.h"
