/*
 * gpuswap_common.h: definitions shared by the stand-in (standin.c) and its test
 * programs (e2e_client.c, vmm_probe.c). e2e_kernels.cu carries a __device__ copy of
 * gpuswap_pattern that must stay identical.
 */
#ifndef GPUSWAP_COMMON_H
#define GPUSWAP_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <strings.h>

/* The word the fill kernel writes at index i: a splitmix-style hash of (seed, i). */
static inline uint32_t gpuswap_pattern(uint32_t seed, uint64_t i)
{
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)seed;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint32_t)x;
}

/* The checksum kernel's weight of word i (wrapping u64 sum of word * weight). */
static inline uint64_t gpuswap_checksum_weight(uint64_t i)
{
    return i % 65521 + 1;
}

/*
 * Parses a byte count: digits, then optionally K/KiB, M/MiB, G/GiB (binary units, any
 * case) or B. Returns 0 on success, -1 on a malformed value or overflow.
 */
static inline int gpuswap_parse_size(const char *s, uint64_t *out)
{
    char *end = NULL;
    uint64_t unit = 1, v;
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    v = strtoull(s, &end, 10);
    if (*end == '\0' || !strcasecmp(end, "b"))
        unit = 1;
    else if (!strcasecmp(end, "k") || !strcasecmp(end, "kib"))
        unit = 1ull << 10;
    else if (!strcasecmp(end, "m") || !strcasecmp(end, "mib"))
        unit = 1ull << 20;
    else if (!strcasecmp(end, "g") || !strcasecmp(end, "gib"))
        unit = 1ull << 30;
    else
        return -1;
    if (v == UINT64_MAX || v > UINT64_MAX / unit)
        return -1;
    *out = v * unit;
    return 0;
}

#endif /* GPUSWAP_COMMON_H */
