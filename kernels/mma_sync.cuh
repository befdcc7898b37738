// The warp-level tensor-core instructions the kernels share (sm_80+ PTX): the binary16 MMA with
// float accumulators and the shared-memory matrix loads that feed it. Internal header: the
// matmul's MMA route (matmul_mma_common.cuh) and the attention's MMA route (attention_mma.cu).
//
// Fragment layout of mma.m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16"), lane = 4 g + t:
//   A (16 x 16, row): a[0] = (row g, k 2t, 2t+1), a[1] = (row g+8, same k), a[2] = (row g,
//     k 2t+8, 2t+9), a[3] = (row g+8, k 2t+8, 2t+9); the lower half of each word holds the lower k.
//   B (16 x 8, col): b0 = (k 2t, 2t+1; col g), b1 = (k 2t+8, 2t+9; col g).
//   C/D (16 x 8): c[0], c[1] = (row g; col 2t, 2t+1), c[2], c[3] = (row g+8; col 2t, 2t+1).
#pragma once

#include <cstdint>

namespace lockstep::kernels::mma_sync {

// c += a * b, binary16 inputs, float accumulators: one instruction, whose internal order of
// summation is the hardware's and the same for every row and column of the tile.
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 binary16 matrices from shared memory; lane L gives the address of row L % 8 of
// matrix L / 8 (16 bytes, 16-byte aligned). Lane 4 g + t receives, of matrix i, row g's elements
// 2t, 2t+1 (Ldmatrix4) or row 2t's and 2t+1's element g (Ldmatrix4Trans) in r[i].
__device__ __forceinline__ void Ldmatrix4(uint32_t (&r)[4], const void* smem_row) {
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem_row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void Ldmatrix4Trans(uint32_t (&r)[4], const void* smem_row) {
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem_row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

}  // namespace lockstep::kernels::mma_sync
