/* AMX-INT8 prefill products over the packed weights (matmul_packed.h): a
 * tile of 16 tokens x 16 output rows (two packed groups) per block of 32
 * elements is one TDPBSSD of the tokens' signed activation bytes (copied once
 * per product into contiguous 16-token tiles: cpu_amx_pack_token) by the
 * weights widened to signed bytes (Q8_0's stored q ^ 0x80 back to q; the
 * nibbles of Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL decoded as
 * matmul_packed_pass.inc does, minus their offset or through the codebook),
 * so no correction terms. The tile's exact block integer sums then take the
 * scalar reference's float steps in AVX-512 (block scales multiplied, added
 * in block order, no fused multiply-adds), so every (row, token) result is
 * the reference's bit for bit, as the VNNI and AVX2 kernels' are: prefill on
 * AMX and decode on VNNI give a sequence the same logits (batch invariance).
 *
 * The K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) take the same steps per
 * sub-block, then the reference's integer steps (matmul_amx_k.c).
 *
 * Run-time choice: the CPU reports AMX-TILE and AMX-INT8 (CPUID leaf 7), the
 * OS enables the tile state (XCR0 bits 17 and 18), and Linux grants this
 * process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, asked once, at the
 * first product AMX would run); the environment variable DI_CPU_AMX=0 (or
 * off, false, no) turns it off (benchmarks side by side, valgrind, hosts that
 * need small signal stacks). Each call loads its tile configuration and
 * releases the tiles before it returns, so it leaves no tile state behind on
 * any thread.
 *
 * Roofline of one call: 2 * 16 * 16 * n_in integer operations per 16 tokens
 * (the TMUL unit's 1,024 a cycle), but per block of 32 a tile store and
 * about 64 AVX-512 float operations of scaling, which bound it: measured 2.4x
 * to 3.9x the 8-row VNNI pass per tile (bench/README.md, 2026-12-06). */
#ifndef DI_BACKEND_CPU_MATMUL_AMX_H
#define DI_BACKEND_CPU_MATMUL_AMX_H

#include <stddef.h>
#include <stdint.h>

#include "backend/types.h"

enum { CPU_AMX_ROWS = 16, CPU_AMX_TOKENS = 16 };

/* 1 when this process runs the AMX-INT8 kernels (see above). Thread-safe;
 * the first call asks Linux for the tile state, which changes the whole
 * process: its signal frames grow to AT_MINSIGSTKSZ (about 12 KiB), so a
 * later sigaltstack() smaller than that fails with ENOMEM on every thread. The
 * products call it only at a prefill that AMX would run (16 tokens or more of
 * a packed format), never at load. */
int cpu_has_amx(void);
/* 1 when the CPU and OS offer AMX-INT8 and DI_CPU_AMX does not turn it off;
 * asks for nothing (scratch sizing at load). */
int cpu_amx_possible(void);
/* 1 when a DI_CPU_AMX value turns AMX off: 0, off, false or no, in any case,
 * with white space around it (isspace's six, as a shell or an .env file may
 * leave them); 0 for NULL and anything else (AMX stays allowed). */
int cpu_amx_env_off(const char *value);
/* What cpu_has_amx answered, without asking: -1 not asked yet, 0 refused (or
 * not possible), 1 granted. Thread-safe. */
int cpu_amx_asked(void);

/* The activations as the kernels read them: for each tile of 16 tokens and
 * each block, contiguous bytes. Q8_0/Q8_1 (blocks of 32, CPU_AMX_TILE_BYTES):
 * the 16 tokens' 32 quants (what one tile load takes), their 16 scales d and
 * their 16 Q8_1 sum terms s as f32 (0 for Q8_0). Q8_K (blocks of 256,
 * CPU_AMX_K_TILE_BYTES): the 16 tokens' 256 quants, their d as f32, their
 * sums of 32 quants as int16 [token][8] and of 16 quants [token][16]. Tiles in token order, blocks
 * in order. */
enum { CPU_AMX_TILE_BYTES = 640, CPU_AMX_K_TILE_BYTES = 4928 };
/* Bytes for the first n_tokens / 16 * 16 tokens of rows of n_in elements
 * quantized to act_type (Q8_0, Q8_1 or Q8_K). */
size_t cpu_amx_tiles_bytes(int act_type, int64_t n_in, int64_t n_tokens);
/* Copy token t's quantized row act_row (of act_type) into its place in tiles
 * (t below the last whole tile). */
void cpu_amx_pack_token(int act_type, const void *act_row, int64_t n_in, int64_t t, char *tiles);

/* Bytes of a kernel's workspace: the weights it widens at a time (kept off the
 * stack: the caller's thread, a host's with a small stack, runs tasks too). */
enum { CPU_AMX_WIDE_BYTES = 24576 };

/* y[t * y_stride + r] = packed rows r = 0..15 (the two groups at w and
 * w + group_bytes) times token t (tiles, above), for t < n_tok, n_tok a
 * multiple of CPU_AMX_TOKENS. wide: CPU_AMX_WIDE_BYTES of workspace, 64-byte
 * aligned, the caller's (its contents do not matter). Thread-safe on distinct
 * wide and y. */
typedef void (*cpu_amx_fn)(int64_t n_in, const void *w, size_t group_bytes, const char *tiles,
                           int64_t n_tok, float *y, int64_t y_stride, void *wide);
/* The AMX kernel for packed dtype on this process, or NULL (no AMX, or a
 * dtype without one). */
cpu_amx_fn cpu_amx_kernel(model_dtype dtype);

/* matmul_amx_k.c's part: the K-quants' kernels (whatever the
 * CPU: callers ask cpu_amx_kernel), and the Q8_K tiles. */
cpu_amx_fn cpu_amx_k_kernel(model_dtype dtype);
void cpu_amx_pack_token_k(const void *act_row, int64_t n_in, int64_t t, char *tiles);

/* AMX-BF16 products for BF16 weights (matmul_amx_bf16.c), prefill and decode
 * alike: a tile of 16 weight rows (the stored rows as they are, no copy at
 * load) times 5 tokens, each token's f32 activations split exactly into three
 * bf16 columns (hi = x rounded to bf16, mid = the rest rounded, lo = what is
 * left, which fits: hi + mid + lo = x, so every product is exact, as an f32
 * fused multiply-add's), one TDPBF16PS per block of 32 elements summing them
 * in f32; a (row, token) output is (hi column + mid column) + lo column. A
 * token takes that arithmetic whether it is alone (decode) or one of many
 * (prefill), and its sums do not depend on the tokens beside it, so batch
 * invariance holds; the results differ from the AVX-512 tiles' (the same
 * exact products summed in another order) by float rounding only: about 1e-7
 * of the products' magnitude (tests/unit/test_cpu_kernels.c). TDPBF16PS
 * treats denormal inputs as zero and flushes denormal results, so products
 * below 2^-126 and activations below about 2^-113 lose what the f32 path keeps
 * (no real activation is that small). llama.cpp rounds
 * the activations to bf16 for its BF16 products (8 bits). Taken where
 * cpu_has_amx_bf16() (the CPU's AMX-BF16 too, and the same request and
 * DI_CPU_AMX switch as cpu_has_amx), at a BF16 product's first call. */
enum { CPU_AMX_BF16_TOKENS = 5, CPU_AMX_BF16_TILE_BYTES = 1024 };
int cpu_amx_bf16_possible(void); /* asks for nothing (sizing) */
int cpu_has_amx_bf16(void);      /* asks Linux, as cpu_has_amx */
/* Bytes of the activations as the kernel reads them: for each group of 5
 * tokens (15 of a tile's 16 columns), each block of 32 elements (the last
 * zero-padded), one 1 KiB tile. */
size_t cpu_amx_bf16_act_bytes(int64_t n_in, int64_t n_tokens);
/* Put token t's n_in activations x (NULL: zeros) into its group's columns
 * of act (a group's last token also zeroes the tiles' unused 16th column;
 * the caller zeroes the last group when fewer tokens fill it). Thread-safe on
 * distinct t. */
void cpu_amx_bf16_pack_token(const float *x, int64_t n_in, int64_t t, char *act);
/* Bytes of cpu_amx_bf16_rows' workspace (within CPU_AMX_WIDE_BYTES). */
enum { CPU_AMX_BF16_WS_BYTES = 8192 };
/* y[t * y_stride + r] = BF16 weight row r (at w + r * w_row bytes, n_in
 * elements) times token t, for r < n_rows (any count) and t < n_tok (any
 * count), the tokens packed from act (act the tile of the first token's
 * group, the first token a group's first). ws: CPU_AMX_BF16_WS_BYTES, 64-byte
 * aligned, the caller's. Thread-safe on distinct ws and y. */
void cpu_amx_bf16_rows(int64_t n_in, const void *w, size_t w_row, int64_t n_rows, const char *act,
                       int64_t n_tok, float *y, int64_t y_stride, void *ws);

#endif
