// e2e_kernels.cu: the kernels of gpuswap-e2e-client for a real GPU. The stand-in
// (standin.c) has the same three built in and must give bit-identical results.
//
// Build on a GPU machine:  nvcc -ptx e2e_kernels.cu -o e2e_kernels.ptx
// Run:                     gpuswap-e2e-client --ptx e2e_kernels.ptx
//
// Every kernel is a grid-stride loop, so any launch configuration covers the range.

// Copy of gpuswap_pattern from gpuswap_common.h; keep the two identical.
__device__ unsigned int gpuswap_pattern(unsigned int seed, unsigned long long i)
{
    unsigned long long x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (unsigned long long)seed;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (unsigned int)x;
}

__device__ unsigned long long first_index()
{
    return (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ unsigned long long stride()
{
    return (unsigned long long)gridDim.x * blockDim.x;
}

// dst[i] = gpuswap_pattern(seed, i) for i < n_words.
extern "C" __global__ void gpuswap_fill(unsigned int *dst, unsigned long long n_words,
                                        unsigned int seed)
{
    for (unsigned long long i = first_index(); i < n_words; i += stride())
        dst[i] = gpuswap_pattern(seed, i);
}

// *out += sum of src[i] * (i % 65521 + 1), wrapping mod 2^64 (so the order of the
// atomic additions does not matter).
extern "C" __global__ void gpuswap_checksum(const unsigned int *src, unsigned long long n_words,
                                            unsigned long long *out)
{
    unsigned long long sum = 0;
    for (unsigned long long i = first_index(); i < n_words; i += stride())
        sum += (unsigned long long)src[i] * (i % 65521ull + 1ull);
    if (sum != 0)
        atomicAdd(out, sum);
}

// y[i] = a * x[i] + y[i]. __fmul_rn and __fadd_rn keep nvcc from fusing the two into
// one FMA, which would round differently from the stand-in's separate multiply and add.
extern "C" __global__ void gpuswap_axpy(float *y, const float *x, unsigned long long n, float a)
{
    for (unsigned long long i = first_index(); i < n; i += stride())
        y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
}
