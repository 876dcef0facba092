#pragma once
#include "runtime/error.h"
#define CUDA_CHECK(call) (void)(call)
#define CUDA_CHECK_LAUNCH() (void)0
