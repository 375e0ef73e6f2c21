// The CUDA decode kernels for bf16 storage (attention/cuda/kernels_bf16.cu) under the host
// emulation (simt.h), renamed as emulated.h says.

#include "simt.h"

#define sparqlab sparqlab_simt
#include "attention/cuda/kernels_bf16.cu"
