// W4A16 for decode-sized steps (up to 64 activation rows) on tensor cores, compiled at run time by
// NVRTC (pipeline/engine/kernels/int4_mma.py packs the weights and launches it).
//
// y [M, N] = (x [M, K] * prequant) @ (q * scale).T, q int4 in [-8, 7], one bf16 scale per row and
// `group` k; prequant (AWQ's per-k scale) multiplies x where the module is built with PREQUANT 1
// (int4_mma.py builds one module of each kind on demand: the scale costs registers).
// One mma.m16n8k16 takes 16 weight rows as A and 8 activation rows as the columns of B, so one
// dequantized A fragment serves NB * 8 activation rows. Per 8 weights a lane spends 4 LOP3 (a
// nibble pair and the bf16 bits of 128 in one op), 3 shifts and 4 packed bf16 FMAs (128 + u ->
// u - 8, exact) before the mma, where a CUDA-core GEMV needs 2-3 ops per weight: the loop stays
// under the HBM stream. Scales are applied in fp32 once per group, to the group's accumulator.
//
// Packed layout (int4_mma.pack), per 16-row tile T and 64-k block: 32 lanes x 4 words (one
// uint4 a lane, 512 contiguous bytes a warp). Word s holds the lane's A fragment of mma step s:
// lane = 4 r + j holds rows r and r + 8, at k = 16 j + 4 s + 2 b + h for register b (0: a0/a1,
// 1: a2/a3) and half h; nibble i + 4 h of the word is register i's half h (bf16x2 order).
// Permuting k this way gives each lane 16 contiguous activations per 64-k block (two uint4).
// Scales: [T, groups, 8] words, word r = bf16 scales of rows r (low) and r + 8 (high).

__device__ __forceinline__ unsigned int lop3_and_or(unsigned int a, unsigned int b, unsigned int c) {
  unsigned int d;  // (a & b) | c in one op; plain C++ compiles to two LOP3s and re-associates
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

__device__ __forceinline__ unsigned int fma_bf16x2(unsigned int a, unsigned int b, unsigned int c) {
  unsigned int d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// The bf16 pair of 2 int4 weights: (word >> shift) & 0x000F000F | bf16 bits of 128 = 128 + u in
// each half, then * 1 - 136 = u - 8 = q, exact. The constants come in registers: the caller keeps
// them there (lop3 takes one immediate)
struct Dequant {
  unsigned int mask = 0x000F000Fu, magic = 0x43004300u, one = 0x3F803F80u, minus136 = 0xC308C308u;
  __device__ __forceinline__ unsigned int q_pair(unsigned int word, int shift) const {
    return fma_bf16x2(lop3_and_or(word >> shift, mask, magic), one, minus136);
  }
};

__device__ __forceinline__ float bf16_lo(unsigned int pair) { return __uint_as_float(pair << 16); }

__device__ __forceinline__ float bf16_hi(unsigned int pair) {
  return __uint_as_float(pair & 0xFFFF0000u);
}

template <int N>
__device__ __forceinline__ void zero(float* a) {
#pragma unroll
  for (int i = 0; i < N; ++i) a[i] = 0.f;
}

__device__ __forceinline__ uint4 mul_bf16x8(uint4 a, uint4 b, unsigned int minus0) {
  return make_uint4(fma_bf16x2(a.x, b.x, minus0), fma_bf16x2(a.y, b.y, minus0),
                    fma_bf16x2(a.z, b.z, minus0), fma_bf16x2(a.w, b.w, minus0));
}

__device__ __forceinline__ void mma_bf16(float* d, const unsigned int* a, unsigned int b0,
                                         unsigned int b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned short to_bf16(float v) {
  unsigned int u = __float_as_uint(v);  // round to nearest even (outputs are never NaN here)
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

// TILES 16-row tiles a block; WARPS split the k groups and add up in shared memory; NB slices
// of 8 activation rows; KB 64-k blocks loaded at a time (a divisor of group / 64).
template <int TILES, int WARPS, int NB, int KB>
__device__ __forceinline__ void w4a16_mma(const uint4* __restrict__ w,
                                          const unsigned int* __restrict__ scales,
                                          const unsigned short* __restrict__ x, int stride_x,
                                          int M, const unsigned short* __restrict__ prequant,
                                          unsigned short* __restrict__ out,
                                          int stride_out, int N, int K, int group) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tile0 = blockIdx.x * TILES, num_tiles = N >> 4;
  const int blocks = K >> 6, groups = K / group, blocks_per_group = group >> 6;
  const int g_begin = warp * groups / WARPS, g_end = (warp + 1) * groups / WARPS;
  const int m = lane >> 2, j = lane & 3;  // B column (activation row in a slice), k quad
  Dequant dq;
  unsigned int minus0 = 0x80008000u;  // x * p + -0 = x * p, rounded once (AWQ's pre-quant scale)
  asm volatile("" : "+r"(dq.mask), "+r"(dq.magic), "+r"(dq.one), "+r"(dq.minus136), "+r"(minus0));
  float total[TILES][NB][4];
  zero<TILES * NB * 4>(&total[0][0][0]);
  // KB 64-k blocks a step: the next step's weights, activations and scales are loaded before
  // this step's mmas (a warp has few blocks, and the loads in flight are what keep HBM busy)
  const int blk_begin = g_begin * blocks_per_group, blk_end = g_end * blocks_per_group;
  uint4 q_next[KB][TILES], x_next[KB][NB][2];
  uint4 p_next[KB][2];  // the pre-quant scales at a lane's 16 k
  unsigned int s_next[KB][TILES];  // each block's group scales (a dependent load would stall)
  auto load = [&](int blk0) {
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
      const int blk = blk0 + kb;
#pragma unroll
      for (int t = 0; t < TILES; ++t) {
        const int tile = min(tile0 + t, num_tiles - 1);  // a short last block reads a real tile
        q_next[kb][t] = __ldg(w + ((size_t)tile * blocks + blk) * 32 + lane);
        s_next[kb][t] = __ldg(scales + ((size_t)tile * groups + blk / blocks_per_group) * 8 + m);
      }
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        const int row = nb * 8 + m;
        x_next[kb][nb][0] = x_next[kb][nb][1] = make_uint4(0, 0, 0, 0);
        if (row < M) {
          const uint4* xv =
              reinterpret_cast<const uint4*>(x + (size_t)row * stride_x + 64 * blk + 16 * j);
          x_next[kb][nb][0] = __ldg(xv);
          x_next[kb][nb][1] = __ldg(xv + 1);
        }
      }
      p_next[kb][0] = p_next[kb][1] = make_uint4(0, 0, 0, 0);
      if (PREQUANT) {  // multiplied in when the step uses it: a load isn't waited for here
        const uint4* pv = reinterpret_cast<const uint4*>(prequant + 64 * blk + 16 * j);
        p_next[kb][0] = __ldg(pv);
        p_next[kb][1] = __ldg(pv + 1);
      }
    }
  };
  if (blk_begin < blk_end) load(blk_begin);
  float acc[TILES][NB][4];
  for (int blk0 = blk_begin; blk0 < blk_end; blk0 += KB) {
    uint4 q[KB][TILES], xs[KB][NB][2];
    unsigned int s2[KB][TILES];
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
#pragma unroll
      for (int t = 0; t < TILES; ++t) {
        q[kb][t] = q_next[kb][t];
        s2[kb][t] = s_next[kb][t];
      }
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        xs[kb][nb][0] = x_next[kb][nb][0];
        xs[kb][nb][1] = x_next[kb][nb][1];
        if (PREQUANT) {
          xs[kb][nb][0] = mul_bf16x8(xs[kb][nb][0], p_next[kb][0], minus0);
          xs[kb][nb][1] = mul_bf16x8(xs[kb][nb][1], p_next[kb][1], minus0);
        }
      }
    }
    if (blk0 + KB < blk_end) load(blk0 + KB);
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
      const int blk = blk0 + kb;
      if ((blk - blk_begin) % blocks_per_group == 0) zero<TILES * NB * 4>(&acc[0][0][0]);
#pragma unroll
      for (int t = 0; t < TILES; ++t) {
        const unsigned int words[4] = {q[kb][t].x, q[kb][t].y, q[kb][t].z, q[kb][t].w};
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          unsigned int a[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) a[i] = dq.q_pair(words[s], 4 * i);
#pragma unroll
          for (int nb = 0; nb < NB; ++nb) {
            const uint4 lo = xs[kb][nb][0], hi = xs[kb][nb][1];
            const unsigned int b[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
            mma_bf16(acc[t][nb], a, b[2 * s], b[2 * s + 1]);
          }
        }
      }
      if ((blk + 1 - blk_begin) % blocks_per_group == 0) {  // the group's end: scale in fp32
#pragma unroll
        for (int t = 0; t < TILES; ++t) {
          const float s_lo = bf16_lo(s2[kb][t]), s_hi = bf16_hi(s2[kb][t]);
#pragma unroll
          for (int nb = 0; nb < NB; ++nb) {
            total[t][nb][0] = fmaf(s_lo, acc[t][nb][0], total[t][nb][0]);
            total[t][nb][1] = fmaf(s_lo, acc[t][nb][1], total[t][nb][1]);
            total[t][nb][2] = fmaf(s_hi, acc[t][nb][2], total[t][nb][2]);
            total[t][nb][3] = fmaf(s_hi, acc[t][nb][3], total[t][nb][3]);
          }
        }
      }
    }
  }
  // a lane's D registers: rows (m, m + 8) of its tile x activation rows (2 j, 2 j + 1) of a slice
  __shared__ float partial[WARPS][TILES * NB * 4][32];
#pragma unroll
  for (int t = 0; t < TILES; ++t)
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp][(t * NB + nb) * 4 + i][lane] = total[t][nb][i];
  __syncthreads();
  for (int o = threadIdx.x; o < TILES * NB * 128; o += WARPS * 32) {
    const int reg = o >> 5, l = o & 31;
    float v = 0.f;
#pragma unroll
    for (int wi = 0; wi < WARPS; ++wi) v += partial[wi][reg][l];  // fixed order: deterministic
    const int t = reg / (NB * 4), nb = (reg >> 2) % NB, i = reg & 3;
    const int row = (tile0 + t) * 16 + (l >> 2) + 8 * (i >> 1);
    const int col = nb * 8 + 2 * (l & 3) + (i & 1);
    if (tile0 + t < num_tiles && col < M) out[(size_t)col * stride_out + row] = to_bf16(v);
  }
}

// The packed weight back to bf16 [N, K] (q * scale, rounded once), for steps past the mma's
// rows: one dense GEMM then. A warp a (tile, 64-k block); lane 4 r + j writes k 16 j .. 16 j + 15
// of rows r and r + 8 (32 contiguous bytes each).
extern "C" __global__ void w4_dequantize(const uint4* __restrict__ w,
                                         const unsigned int* __restrict__ scales,
                                         unsigned int* __restrict__ out, int N, int K, int group) {
  const int lane = threadIdx.x & 31;
  const int blocks = K >> 6, groups = K / group;
  const long long unit = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (unit >= (long long)(N >> 4) * blocks) return;
  const int tile = (int)(unit / blocks), blk = (int)(unit % blocks), r = lane >> 2, j = lane & 3;
  const uint4 q = __ldg(w + unit * 32 + lane);
  const unsigned int s2 = __ldg(scales + ((size_t)tile * groups + blk * 64 / group) * 8 + r);
  const float scale[2] = {bf16_lo(s2), bf16_hi(s2)};
  const Dequant dq;
  const unsigned int words[4] = {q.x, q.y, q.z, q.w};
  unsigned int rows[2][8];  // bf16 pairs of rows r and r + 8, k 16 j + 2 p .. + 1 in word p
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned int q_pair = dq.q_pair(words[s], 4 * i);
      const float lo = bf16_lo(q_pair) * scale[i & 1], hi = bf16_hi(q_pair) * scale[i & 1];
      rows[i & 1][2 * s + (i >> 1)] = to_bf16(lo) | ((unsigned int)to_bf16(hi) << 16);
    }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const size_t row = tile * 16 + r + 8 * half;
    uint4* dst = reinterpret_cast<uint4*>(out + (row * K + blk * 64 + 16 * j) / 2);
    dst[0] = make_uint4(rows[half][0], rows[half][1], rows[half][2], rows[half][3]);
    dst[1] = make_uint4(rows[half][4], rows[half][5], rows[half][6], rows[half][7]);
  }
}

#define W4A16_MMA(T, W, NB, KB)                                                                 \
  extern "C" __global__ void __launch_bounds__(32 * W) w4a16_mma_##T##_##W##_##NB##_##KB(        \
      const uint4* w, const unsigned int* s, const unsigned short* x, int stride_x, int M,      \
      const unsigned short* p, unsigned short* out, int stride_out, int N, int K, int group) {  \
    w4a16_mma<T, W, NB, KB>(w, s, x, stride_x, M, p, out, stride_out, N, K, group);             \
  }
