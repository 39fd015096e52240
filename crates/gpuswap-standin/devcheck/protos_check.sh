#!/bin/sh
# protos_check.sh SUBSET_H CUDA_INCLUDE_DIR: redeclares the subset's prototypes after NVIDIA's
# cuda.h; the compiler rejects any that conflict ("conflicting types").
set -e
sed -n '/^\/\* Initialization, version/,/^#ifdef __cplusplus/p' "$1" | grep -v '^#ifdef' > /tmp/protos.inc
printf '#include <cuda.h>\n#undef cuGetProcAddress\n#include "/tmp/protos.inc"\nint main(void){return 0;}\n' > /tmp/protos_check.c
gcc -std=gnu11 -Wall -Werror -I"$2" -c /tmp/protos_check.c -o /tmp/protos_check.o
echo "prototypes: compatible with $2/cuda.h"
