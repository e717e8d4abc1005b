// common/host_device.h — INVAR_HD: a function in a header that C files, CUDA host code and
// CUDA kernels all call, with one definition.
#ifndef INVAR_COMMON_HOST_DEVICE_H
#define INVAR_COMMON_HOST_DEVICE_H

#ifdef __CUDACC__
#define INVAR_HD __host__ __device__ __forceinline__
#else
#define INVAR_HD static inline
#endif

#endif
