/* Prints the ABI facts cuda_subset.h claims; build with -DREAL against NVIDIA's cuda.h to compare. */
#ifdef REAL
#include <cuda.h>
#else
#include "cuda_subset.h"
#endif
#include <stddef.h>
#include <stdio.h>
#define V(x) printf("%s = %lld\n", #x, (long long)(x));
#define S(t) printf("sizeof(%s) = %zu, align %zu\n", #t, sizeof(t), _Alignof(t));
#define O(t, f) printf("offsetof(%s, %s) = %zu\n", #t, #f, offsetof(t, f));
int main(void)
{
#ifdef REAL
    V(CUDA_VERSION)
#endif
    V(CUDA_SUCCESS) V(CUDA_ERROR_INVALID_VALUE) V(CUDA_ERROR_OUT_OF_MEMORY) V(CUDA_ERROR_NOT_INITIALIZED)
    V(CUDA_ERROR_NO_DEVICE) V(CUDA_ERROR_INVALID_DEVICE) V(CUDA_ERROR_INVALID_IMAGE) V(CUDA_ERROR_INVALID_CONTEXT)
    V(CUDA_ERROR_INVALID_HANDLE) V(CUDA_ERROR_NOT_FOUND) V(CUDA_ERROR_ILLEGAL_ADDRESS) V(CUDA_ERROR_NOT_SUPPORTED) V(CUDA_ERROR_UNKNOWN)
    V(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK) V(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X) V(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)
    V(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z) V(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X) V(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)
    V(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z) V(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK) V(CU_DEVICE_ATTRIBUTE_WARP_SIZE)
    V(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) V(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)
    V(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) V(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    V(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
    V(CU_MEM_LOCATION_TYPE_INVALID) V(CU_MEM_LOCATION_TYPE_DEVICE) V(CU_MEM_LOCATION_TYPE_HOST)
    V(CU_MEM_LOCATION_TYPE_HOST_NUMA) V(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
    V(CU_MEM_ALLOCATION_TYPE_INVALID) V(CU_MEM_ALLOCATION_TYPE_PINNED)
    V(CU_MEM_HANDLE_TYPE_NONE) V(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    V(CU_MEM_ACCESS_FLAGS_PROT_NONE) V(CU_MEM_ACCESS_FLAGS_PROT_READ) V(CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    V(CU_MEM_ALLOC_GRANULARITY_MINIMUM) V(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    V(CU_GET_PROC_ADDRESS_SUCCESS) V(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) V(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
    V(CU_IPC_HANDLE_SIZE)
    S(cuuint32_t) S(cuuint64_t) S(CUresult) S(CUdevice) S(CUdeviceptr) S(CUcontext) S(CUmodule) S(CUfunction) S(CUstream)
    S(CUmemoryPool) S(CUmemGenericAllocationHandle) S(CUipcMemHandle) S(CUdevice_attribute) S(CUmemLocationType)
    S(CUmemAllocationType) S(CUmemAllocationHandleType) S(CUmemAccess_flags) S(CUmemAllocationGranularity_flags)
    S(CUdriverProcAddressQueryResult) S(CUmemLocation) S(CUmemAllocationProp) S(CUmemAccessDesc)
    O(CUmemLocation, type) O(CUmemLocation, id)
    O(CUmemAllocationProp, type) O(CUmemAllocationProp, requestedHandleTypes) O(CUmemAllocationProp, location)
    O(CUmemAllocationProp, win32HandleMetaData) O(CUmemAllocationProp, allocFlags)
    O(CUmemAllocationProp, allocFlags.compressionType) O(CUmemAllocationProp, allocFlags.gpuDirectRDMACapable)
    O(CUmemAllocationProp, allocFlags.usage) O(CUmemAllocationProp, allocFlags.reserved)
    O(CUmemAccessDesc, location) O(CUmemAccessDesc, flags)
    return 0;
}
