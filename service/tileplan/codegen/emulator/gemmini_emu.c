/*
 * gemmini_emu.c -- functional + instruction-level timing emulator of a Gemmini-like accelerator.
 *
 * Runs the instructions of gemmini.h's macros: on a host that is not RISC-V, the stand-in gemmini.h turns every
 * Gemmini instruction into emu_rocc(funct7, rs1, rs2) with the words Gemmini's RoCC interface receives, which
 * this file decodes (k_* codes and bit fields of Gemmini's header), and gemmini_fence() into emu_fence().
 * Written for Tileplan from Gemmini's published behaviour (address bits, dataflows, mvin/mvout limits, scaling,
 * instruction encodings); no code is taken from Gemmini.
 *
 * Functional model
 *   scratchpad: spad_rows rows of DIM int8; accumulator: acc_rows rows of DIM int32.
 *   Local address bit 31 = accumulator, bit 30 = accumulate on write, bit 29 = read full int32 width,
 *   0xFFFFFFFF = garbage (no operand / discard result).
 *   A non-accumulating write of `cols` < DIM elements zeroes the rest of the row; an accumulating write
 *   touches only its columns.  Reading a row that was never written is a trap, as is accumulating into one.
 *
 * Memory ordering (what only gemmini_fence() makes safe)
 *   Gemmini's loads and stores run decoupled from the CPU, and its reservation station orders its own
 *   instructions by local (scratchpad / accumulator) addresses only: until a fence, the CPU must not read or
 *   write DRAM an mvout writes, must not write DRAM an mvin reads, and an mvin must not read DRAM an mvout
 *   wrote.  The emulator makes each of these a trap:
 *   - an mvout's rows reach DRAM only at the fence (deferred); until then the pages they fall in are
 *     inaccessible (mprotect PROT_NONE), and the pages an mvin read are read-only;
 *   - a CPU access that faults on such a page is compared with the pending transfers: one that touches their
 *     bytes traps ("CPU read of DRAM an un-fenced mvout writes"), one that only shares the page with them
 *     opens the page until the next fence (its transfers are then no longer watched, but an mvout's data still
 *     arrives only at the fence);
 *   - inside emu_run_entry the trap ends the run like any other; a fault outside a run (CPU code between
 *     two runs of one session) records the trap, which the next emu_run_entry returns.
 *   Only buffers in ordinary read-write memory off the registering thread's stack are watched (emu_add_region
 *   checks /proc/self/maps and the stack bounds).
 *
 * Timing model (parameters: emu_timing_t; Tileplan derives them from the calibrated cost model, see
 * tileplan.codegen.pipeline.timing_for)
 *   Instructions are dispatched in program order (issue_cycles each) into three in-order units:
 *   load (config_ld, mvin*), execute (config_ex, preload, compute*), store (config_st, mvout).
 *   Each unit's queue holds queue_load / queue_exec / queue_store instructions (0 = unbounded: only
 *   scratchpad/accumulator hazards limit how far a unit runs ahead).  Cross-unit hazards on local rows
 *   (RAW, WAR, WAW) wait; within a unit order is implicit.
 *   DMA (one channel shared by loads and stores): a transfer of `rows` rows of `row_bytes` costs
 *   rows * ceil(row_bytes / dma_request_bytes) * dma_request_cycles + bytes / dram_bytes_per_cycle and
 *   completes dma_latency cycles after that.  bytes = rows * row_bytes, except: a load from DRAM address 0
 *   (NULL) writes zero rows and moves no bytes (requests only; Gemmini's zero-fill mvin), and a load with
 *   DRAM row stride 0 reads its row once (the repeats are requests served on chip).
 *   Execute: a preload of a weight block takes preload_cycles (a preload with no operand, which only names
 *   the output rows of the next compute, takes 0); a compute takes compute_op_cycles + compute_row_cycles
 *   per row of A streamed through the array; results are ready compute_latency cycles after it ends.
 *   config_ex opens a library call: it occupies the execute unit for call_cycles and, in order with the
 *   loads, the DMA channel for call_cycles (the per-call cost seen by either unit); it is dispatched no
 *   earlier than call_floor_cycles after the previous config_ex (the host's time to set up and issue a call,
 *   hidden behind the previous call's work when that is longer).  A program's cycles end run_cycles after
 *   its last operation completes (first-load and last-store latency, the closing fence).
 *   Contention: while the DMA and the array are both busy they slow each other down: an operation that
 *   overlaps the other resource's busy time by `ov` cycles takes overlap_loss * ov longer, and the other
 *   resource's next operation is pushed back by the same amount (processor sharing of the local memories).
 *   That timeline is reported as emu_stats_t.timeline_cycles.
 *
 * Reported cycles: the calibrated cost model's per-call timing over the instructions issued (one Gemmini
 * timing for the emulator and the model, tileplan.cost.gemmini._cycle_terms / _totals).  Every config_ex opens a
 * call; per call the emulator counts what the model's call features count: DMA requests and bytes of its loads and
 * stores (a request on a strided row of a buffer larger than l2_bytes also waits dram_request_cycles, one on a buffer
 * larger than llc_bytes llc_miss_cycles more, a store twice, and a call's DMA lasts at least such requests x refill_cycles, a
 * store's twice, and its loads from tensors beyond the LLC x dram_byte_cycles per byte; those loads' reads of whole
 * rows, one per 64 bytes, wait and cross the memory bus as strided requests DRAM serves do; a store request
 * behind earlier ones of its mvout to the same 64-byte block block_wait_cycles each, see store_chain), rows
 * streamed by its computes (at least compute_floor_cycles each), compute instructions, weight preloads.  A call
 * lasts max(its DMA, its execute) + overlap_loss x the shorter when calls_overlap (else their sum), at least
 * call_floor_cycles, plus call_cycles; with call_slots (the library's convolution calls: loop_conv_ws's two call
 * slots) the DMA its execute overlaps is the next call's (the last call's, the first call's), not its own; a run
 * adds, once, the part of one average call the overlap hides and run_cycles.
 */
#define _GNU_SOURCE
#include "gemmini.h" /* the k_* codes, CONFIG_* selectors and constants the instructions carry */
#include "gemmini_emu.h"

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <errno.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <ucontext.h>
#include <unistd.h>

#undef DIM /* the emulator's array size is a run-time parameter (emu_create), not gemmini_params.h's */

/* Local address bits (Gemmini's; its header gives them no names). */
#define EMU_ACC_ADDR 0x80000000u
#define EMU_ACCUMULATE 0x40000000u
#define EMU_READ_FULL 0x20000000u

/* ------------------------------------------------------------------------------------------------ */
/* Public emulator interface: gemmini_emu.h (used from Python through ctypes, and by host glue code).  */

enum {
  OP_CONFIG_EX = 0,
  OP_CONFIG_LD,
  OP_CONFIG_ST,
  OP_MVIN,
  OP_MVIN2,
  OP_MVIN3,
  OP_MVOUT,
  OP_PRELOAD,
  OP_COMPUTE_PRELOADED,
  OP_COMPUTE_ACCUMULATED,
  OP_FENCE,
  OP_FLUSH,
  OP_COUNT
};
_Static_assert(OP_COUNT == EMU_OP_COUNT, "gemmini_emu.h counts every opcode");

static const char *const OP_NAMES[OP_COUNT] = {
    "config_ex", "config_ld", "config_st", "mvin", "mvin2", "mvin3", "mvout",
    "preload", "compute_preloaded", "compute_accumulated", "fence", "flush"};

/* A decoded instruction for emu_run_list: op plus up to 6 integer arguments and one float. */
typedef struct {
  int32_t op;
  int32_t pad;
  uint64_t a[6];
  double f;
} emu_inst_t;

enum { U_LOAD = 0, U_EXEC = 1, U_STORE = 2 };

typedef struct {
  uintptr_t base;
  uint64_t size;
  int writable;  /* Gemmini may write it (mvout) */
  int guardable; /* ordinary read-write memory: its pages may be protected while DMA is pending */
} region_t;

/* A DMA transfer issued since the last fence: `rows` rows of `row_bytes`, `stride` bytes apart (0: one row
 * read repeatedly).  An mvout's rows wait in e->pend_data (from byte `data`) until the fence. */
typedef struct {
  uintptr_t base;
  uint64_t stride, row_bytes;
  uint32_t rows;
  int op;
  int64_t index; /* its instruction number */
  uint64_t data;
} dma_rec_t;

typedef struct {
  dma_rec_t *v;
  size_t n, cap;
} dma_list_t;

/* Pages protected since the last fence: open-addressing table page -> state. */
enum { PG_OPEN = 0, PG_READ_ONLY = 1 /* an mvin reads it */, PG_NO_ACCESS = 2 /* an mvout writes it */,
       PG_RELEASED = 3 /* shared with CPU data the program touched: left open until the fence */ };
typedef struct {
  uintptr_t page; /* 0: empty slot */
  uint8_t state;
} page_slot_t;

typedef struct {
  uint64_t stride;
  float scale;
  int shrunk;
  uint32_t block_stride;
} ld_cfg_t;

typedef struct emu {
  uint32_t dim, spad_rows, acc_rows, max_mvin_blocks;
  emu_timing_t t;

  int8_t *spad;
  int32_t *acc;
  uint8_t *spad_written, *acc_written;
  /* per-row timing: time the last write is complete, its unit, time the last read is complete */
  double *spad_wdone, *acc_wdone, *spad_rdone, *acc_rdone;
  int8_t *spad_wunit, *acc_wunit;

  /* configuration */
  ld_cfg_t ld[3];
  uint64_t st_stride;
  int st_act;
  float st_scale;
  int dataflow, sys_act, sys_shift;
  float ex_acc_scale; /* config_ex's acc_scale: applied to operands the execute unit reads from the accumulator */
  uint32_t a_stride;
  int a_tr, b_tr;

  /* systolic array state */
  int32_t *weights, *weights_pending, *os_state, *os_d;
  int weights_pending_valid;
  uint32_t weights_cols, weights_pending_cols;
  int preload_pending;
  uint32_t c_addr, c_rows, c_cols;
  int32_t *blk_a, *blk_b, *blk_c;

  /* DRAM regions that programs may touch */
  region_t *regions;
  int n_regions, cap_regions;

  /* timing state */
  double t_dispatch, unit_free[3], dram_free, max_complete;
  double last_call; /* dispatch time of the last config_ex (-1: none yet) */
  /* the cost model's per-call features of the open call, and the closed calls' sums (see "Reported cycles") */
  double cf_ld_req, cf_ld_bytes, cf_st_req, cf_st_bytes, cf_ex_rows, cf_ops, cf_pre, cf_dram_req, cf_block_req;
  int cf_any;
  /* tensors (emu_add_tensor: timing only), each with the span its loads touched over the run [tlo, thi), and the
   * loads (address, rows, row bytes, stride, hashed) of the previous call and of the open one: a load the previous
   * call made too finds its data in the L2 (tileplan.cost.gemmini._in_l2_across); the others are read from DRAM
   * (far_bytes) when their tensor's touched span exceeds the LLC, which is known at the run's end: per call and
   * tensor, the bytes of such loads (farc), counted then (model_cycles) */
  struct tspan { uintptr_t lo, hi, tlo, thi; } *tn;
  int tn_n, tn_cap;
  struct farc { uint32_t call; int tensor; double bytes; } *fc;
  size_t fc_n, fc_cap;
  uint64_t *far_prev, *far_cur;
  size_t far_prev_n, far_cur_n, far_prev_cap, far_cur_cap;
  /* strided transfers: per (buffer, row stride) group, the span of DRAM it touched over the run and the width of
   * its rows that any transfer touched (columns beyond it are padding no one reads); per call, each group's
   * requests and the byte columns of its rows the call covered (see count_transfer) */
  struct sgroup { int region; uint64_t stride, width; uintptr_t lo, hi; } *sg;
  int sg_n, sg_cap;
  struct cgroup { int group; double req, st_req; int n_iv; uint64_t iv[2 * 16]; } cg[16];
  int cg_n;
  /* closed calls: features (EMU_FEATURES doubles, dram_req = 0) and their contributions of rows not covered whole
   * (group, requests, the columns covered from a row's start) */
  double *calls_f;
  size_t calls_n, calls_cap;
  struct contrib { uint32_t call; int group; double req, st_req; uint64_t prefix; } *ct;
  size_t ct_n, ct_cap;
  int cur_unit;
  double preload_done; /* when the last preload left the execute unit */
  /* busy intervals of the two contended resources (0: DMA channel, 1: array), in time order */
  double *iv_start[2], *iv_end[2], *iv_cum[2], *iv_w[2];
  size_t iv_n[2], iv_cap[2];
  double *ring[3]; /* per unit: completion times of its last queue entries */
  uint32_t ring_n[3];
  uint64_t unit_count[3];

  emu_stats_t st;

  /* DMA issued since the last fence (see "Memory ordering" above) */
  dma_list_t pend_in, pend_out;
  uint8_t *pend_data;
  size_t pend_data_n, pend_data_cap;
  page_slot_t *pages;
  size_t page_cap, page_n;
  uintptr_t page_size;

  /* traps */
  sigjmp_buf *jb;
  pthread_t run_thread; /* the thread inside emu_run_entry (valid while jb is set) */
  int trapped;
  int64_t trap_index;
  int trap_op;
  char trap_msg[512];
  int cur_op;
} emu_t;

static emu_t *g_cur = NULL;

/* ------------------------------------------------------------------------------------------------ */
/* Traps                                                                                            */

static void trap(emu_t *e, const char *fmt, ...) {
  char buf[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  e->trapped = 1;
  e->trap_index = (int64_t)e->st.instructions - 1;
  e->trap_op = e->cur_op;
  snprintf(e->trap_msg, sizeof e->trap_msg, "instruction #%lld (%s): %s", (long long)e->trap_index,
           (e->cur_op >= 0 && e->cur_op < OP_COUNT) ? OP_NAMES[e->cur_op] : "?", buf);
  if (e->jb) siglongjmp(*e->jb, 1);
  fprintf(stderr, "gemmini emulator trap outside a run: %s\n", e->trap_msg);
  abort();
}

static emu_t *cur(void) {
  if (!g_cur) {
    fprintf(stderr, "gemmini emulator: API called with no emulator running\n");
    abort();
  }
  return g_cur;
}

/* ------------------------------------------------------------------------------------------------ */
/* Arithmetic helpers                                                                               */

static int8_t sat8(int64_t v) { return (int8_t)(v > 127 ? 127 : (v < -128 ? -128 : v)); }
static int32_t sat32(int64_t v) {
  return (int32_t)(v > INT32_MAX ? INT32_MAX : (v < INT32_MIN ? INT32_MIN : v));
}
static int32_t wrap_add(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }

/* C += A W for D x D blocks (row-major), every sum wrapping at 32 bits as the array's int32 accumulators do.
 * A and W always hold int8 values (read_block's only sources are scratchpad bytes and the accumulator read
 * through sat8), so a product fits 16 bits and a pair of them 17.  The hot loop of an emulated run: on x86-64
 * with AVX2 (checked at run time) pairs of k multiply-add in one vpmaddwd, exactly; elsewhere a loop of
 * constant length the compiler vectorises.  Both sum the same exact products modulo 2^32: the same bits. */
#define MAC_BLOCK_FIXED(N)                                                                  \
  for (uint32_t i = 0; i < (N); i++) {                                                      \
    uint32_t *cr = (uint32_t *)c + i * (N);                                                 \
    const int32_t *ar = a + i * (N);                                                        \
    for (uint32_t k = 0; k < (N); k++) {                                                    \
      uint32_t av = (uint32_t)ar[k];                                                        \
      if (!av) continue;                                                                    \
      const uint32_t *wr = (const uint32_t *)w + k * (N);                                   \
      for (uint32_t j = 0; j < (N); j++) cr[j] += av * wr[j];                               \
    }                                                                                       \
  }
static void mac_block16(int32_t *restrict c, const int32_t *restrict a, const int32_t *restrict w) {
  MAC_BLOCK_FIXED(16)
}
static void mac_block32(int32_t *restrict c, const int32_t *restrict a, const int32_t *restrict w) {
  MAC_BLOCK_FIXED(32)
}
#if defined(__x86_64__) && defined(__GNUC__)
#define MAC_AVX2 1
/* GCC's vector extensions and its vpmaddwd builtin, as <immintrin.h> defines the intrinsics (the same
 * operations), without that header: its ~70,000 lines were half of this file's compile time at -O2. */
typedef uint32_t tp_v8su __attribute__((vector_size(32)));
typedef uint32_t tp_v8su_u __attribute__((vector_size(32), may_alias, aligned(1))); /* unaligned load / store */
typedef short tp_v16hi __attribute__((vector_size(32)));
/* N = 16 or 32: W's rows 2p and 2p+1 interleaved as 16-bit pairs, then per row of A, N/8 accumulators. */
__attribute__((target("avx2"), always_inline)) static inline void mac_block_avx2(int32_t *restrict c, const int32_t *restrict a,
                                                                   const int32_t *restrict w, const uint32_t N) {
  tp_v8su wp[16][4];
  for (uint32_t p = 0; p < N / 2; p++)
    for (uint32_t v = 0; v < N / 8; v++) {
      tp_v8su r0 = *(const tp_v8su_u *)(w + (2 * p) * N + 8 * v);
      tp_v8su r1 = *(const tp_v8su_u *)(w + (2 * p + 1) * N + 8 * v);
      wp[p][v] = (r0 & 0xffffu) | (r1 << 16);
    }
  for (uint32_t i = 0; i < N; i++) {
    const int32_t *ar = a + i * N;
    tp_v8su acc[4];
    for (uint32_t v = 0; v < N / 8; v++) acc[v] = *(const tp_v8su_u *)(c + i * N + 8 * v);
    for (uint32_t p = 0; p < N / 2; p++) {
      uint32_t pair = ((uint32_t)ar[2 * p] & 0xffffu) | ((uint32_t)ar[2 * p + 1] << 16);
      if (!pair) continue;
      tp_v8su b = {pair, pair, pair, pair, pair, pair, pair, pair};
      for (uint32_t v = 0; v < N / 8; v++)
        acc[v] += (tp_v8su)__builtin_ia32_pmaddwd256((tp_v16hi)b, (tp_v16hi)wp[p][v]);
    }
    for (uint32_t v = 0; v < N / 8; v++) *(tp_v8su_u *)(c + i * N + 8 * v) = acc[v];
  }
}
__attribute__((target("avx2"))) static void mac_block16_avx2(int32_t *restrict c, const int32_t *restrict a,
                                                              const int32_t *restrict w) {
  mac_block_avx2(c, a, w, 16);
}
__attribute__((target("avx2"))) static void mac_block32_avx2(int32_t *restrict c, const int32_t *restrict a,
                                                              const int32_t *restrict w) {
  mac_block_avx2(c, a, w, 32);
}
#endif
static void mac_block(int32_t *restrict c, const int32_t *restrict a, const int32_t *restrict w, uint32_t D) {
#ifdef MAC_AVX2
  static int avx2 = -1;
  if (avx2 < 0) avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
  if (avx2 && D == 16) { mac_block16_avx2(c, a, w); return; }
  if (avx2 && D == 32) { mac_block32_avx2(c, a, w); return; }
#endif
  if (D == 16) { mac_block16(c, a, w); return; }
  if (D == 32) { mac_block32(c, a, w); return; }
  MAC_BLOCK_FIXED(D)
}

/* Row copies the compiler vectorises (restrict: the operands never overlap; a full row of the common array
 * sizes is a loop of constant length, which -O2 vectorises too). */
static void widen_row(int32_t *restrict dst, const int8_t *restrict src, uint32_t n) {
  if (n == 16) { for (uint32_t c = 0; c < 16; c++) dst[c] = src[c]; return; }
  if (n == 32) { for (uint32_t c = 0; c < 32; c++) dst[c] = src[c]; return; }
  for (uint32_t c = 0; c < n; c++) dst[c] = src[c];
}
static void copy_row(int8_t *restrict dst, const int8_t *restrict src, uint32_t n) {
  if (n == 16) { memcpy(dst, src, 16); return; }
  if (n == 32) { memcpy(dst, src, 32); return; }
  memcpy(dst, src, n);
}
static void add_row(uint32_t *restrict dst, const uint32_t *restrict src, uint32_t n) {
  if (n == 16) { for (uint32_t c = 0; c < 16; c++) dst[c] += src[c]; return; }
  if (n == 32) { for (uint32_t c = 0; c < 32; c++) dst[c] += src[c]; return; }
  for (uint32_t c = 0; c < n; c++) dst[c] += src[c];
}

/* float32 multiply, then round half to even (the default rounding mode), as Gemmini's scale units do. */
static int64_t scale_rne(int64_t x, float s) {
  float y = (float)x * s;
  if (y != y) return 0;
  if (y > 9.0e18f) return INT64_MAX / 2;
  if (y < -9.0e18f) return INT64_MIN / 2;
  return (int64_t)nearbyintf(y);
}

/* Arithmetic right shift rounding half to even (Gemmini's ROUNDING_RIGHT_SHIFT behaviour). */
static int64_t rounding_shift(int64_t x, int shift) {
  if (shift <= 0) return x;
  int64_t q = x >> shift;
  int64_t half_bit = (x >> (shift - 1)) & 1;
  int64_t below = shift > 1 ? (x & ((((int64_t)1) << (shift - 1)) - 1)) != 0 : 0;
  int64_t odd = q & 1;
  return q + (half_bit & (below | odd));
}

/* ------------------------------------------------------------------------------------------------ */
/* Addresses and regions                                                                            */

static int is_garbage(uint32_t a) { return a == GARBAGE_ADDR; }
static int is_acc(uint32_t a) { return (a & EMU_ACC_ADDR) != 0; }
static int is_accumulate(uint32_t a) { return (a & EMU_ACCUMULATE) != 0; }
static int is_full(uint32_t a) { return (a & EMU_READ_FULL) != 0; }
static uint32_t row_of(uint32_t a) { return a & 0x1FFFFFFFu; }

static void check_rows(emu_t *e, uint32_t addr, uint32_t rows, uint32_t stride, const char *what) {
  uint32_t base = row_of(addr);
  uint32_t limit = is_acc(addr) ? e->acc_rows : e->spad_rows;
  if (!is_acc(addr) && (addr & (EMU_ACCUMULATE | EMU_READ_FULL)))
    trap(e, "%s address 0x%08x: accumulate/read-full bits set on a scratchpad address", what, addr);
  if (rows == 0) return;
  uint64_t last = (uint64_t)base + (uint64_t)(rows - 1) * stride;
  if (last >= limit)
    trap(e, "%s rows %u..%llu out of bounds of the %s (%u rows)", what, base, (unsigned long long)last,
         is_acc(addr) ? "accumulator" : "scratchpad", limit);
}

static void check_dram(emu_t *e, uintptr_t p, uint64_t bytes, int write) {
  for (int i = 0; i < e->n_regions; i++) {
    region_t *r = &e->regions[i];
    if (p >= r->base && p + bytes <= r->base + r->size) {
      if (write && !r->writable) trap(e, "DRAM write to read-only buffer #%d at offset %llu", i,
                                      (unsigned long long)(p - r->base));
      return;
    }
  }
  trap(e, "DRAM %s of %llu bytes at %p is outside every registered buffer", write ? "write" : "read",
       (unsigned long long)bytes, (void *)p);
}

/* ------------------------------------------------------------------------------------------------ */
/* Timing                                                                                           */

/* DMA occupancy of `rows` rows of `row_bytes`: requests plus bytes at the effective bandwidth.  `bytes_moved`
 * is what crosses the DRAM interface (0 for a zero-fill, one row for a stride-0 load). */
static double dram_cycles(emu_t *e, uint32_t rows, uint64_t row_bytes, double bytes_moved) {
  double req = e->t.dma_request_bytes;
  double per_row = ceil((double)row_bytes / req);
  if (per_row < 1) per_row = 1;
  return rows * per_row * e->t.dma_request_cycles + bytes_moved / e->t.dram_bytes_per_cycle;
}

/* The cost model's per-call timing (tileplan.cost.gemmini._cycle_terms) of one call's features f (CALL_FEATURES
 * order: ld_req, ld_bytes, st_req, st_bytes, ex_rows, ex_ops, preloads, dram_req, block_req, far_req, far_bytes,
 * far_st_req). */
static void call_terms(const emu_t *e, const double *f, double *dma, double *ex) {
  const emu_timing_t *t = &e->t;
  /* the loads' reads of whole rows DRAM serves (tileplan.cost.gemmini.whole_far_reads): one per 64-byte block of
   * far_bytes, less the strided loads DRAM serves (far_req - far_st_req); each waits as a strided request does */
  double whole = f[10] / t->dma_request_bytes - (f[9] - f[11]);
  if (!(whole > 0)) whole = 0.0;
  double far = f[9] + f[11] + whole;
  double d = (f[0] + f[2]) * t->dma_request_cycles + (f[1] + f[3]) / t->dram_bytes_per_cycle +
             (f[7] + whole) * t->dram_request_cycles + far * t->llc_miss_cycles;
  /* (a strided store beyond the LLC waits on DRAM twice: the L2 fills its block, then writes it back) */
  /* the DMA cannot load faster than DRAM reads the tensors the LLC cannot hold */
  if (f[10] * t->dram_byte_cycles > d) d = f[10] * t->dram_byte_cycles;
  /* nor faster than the memory bus moves the 64-byte blocks of the requests DRAM serves (a strided store's twice:
   * the L2 fills the block and writes it back) */
  if (far * t->refill_cycles > d) d = far * t->refill_cycles;
  /* stores behind others to their 64-byte block wait on top of that (the model adds them after the bound) */
  d += f[8] * t->block_wait_cycles;
  *dma = d;
  *ex = f[4] + f[5] * t->compute_op_cycles + f[6] * t->preload_cycles;
}

/* A call's cycles from its DMA d, its execute x and the DMA its execute overlaps, d_next: its own, or with
 * call_slots the next call's (loop_conv_ws's two call slots: a call's computes overlap the next call's loads;
 * tileplan.cost.gemmini._slot_loop). */
static double call_total(const emu_t *e, double d, double x, double d_next) {
  const emu_timing_t *t = &e->t;
  double o = t->call_slots > 0 ? d_next : d;
  double lo = o < x ? o : x, hi = o < x ? x : o;
  double work = t->calls_overlap > 0 ? hi + t->overlap_loss * lo : d + x;
  if (work < t->call_floor_cycles) work = t->call_floor_cycles;
  return work + t->call_cycles;
}

/* Whether a group's rows lie in a tensor the L2 cannot hold: the DRAM span its transfers touched over the run. */
static int group_beyond_l2(const emu_t *e, int g) { return (double)(e->sg[g].hi - e->sg[g].lo) > e->t.l2_bytes; }

/* ... and the LLC behind it as well (tileplan.cost.gemmini: far_req). */
static int group_beyond_llc(const emu_t *e, int g) { return (double)(e->sg[g].hi - e->sg[g].lo) > e->t.llc_bytes; }

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The byte columns [0, prefix) of its rows that the call's transfers of this group covered without a gap (0: none
 * from a row's start, or too many pieces to tell).  Intervals [lo, hi) within [0, stride), sorted by start. */
static uint64_t group_prefix(struct cgroup *c) {
  if (c->n_iv < 0) return 0; /* (too many pieces to tell: strided) */
  qsort(c->iv, c->n_iv, 2 * sizeof(uint64_t), cmp_u64);
  uint64_t reach = 0;
  for (int i = 0; i < c->n_iv; i++) {
    if (c->iv[2 * i] > reach) break;
    if (c->iv[2 * i + 1] > reach) reach = c->iv[2 * i + 1];
  }
  return reach;
}

/* Did a call whose transfers covered [0, prefix) of this group's rows move whole rows (not a strided channel tile)?
 * Whole rows: every byte column the run touched at that stride, i.e. the rows' real width (a copy padded to the
 * tile grid, e.g. a 1000-column weight matrix in rows 1024 bytes apart, has columns no transfer touches: read up to
 * its padding, a row is one sequential stream, as the model counts a tile of all of a tensor's channels). */
static int group_whole(const emu_t *e, int g, uint64_t prefix) {
  uint64_t need = e->sg[g].width < e->sg[g].stride ? e->sg[g].width : e->sg[g].stride;
  return prefix >= need;
}

static void *grow(void *p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return p;
  size_t c = *cap ? 2 * *cap : 256;
  while (c < need) c *= 2;
  void *q = realloc(p, c * size);
  if (!q) return NULL;
  *cap = c;
  return q;
}

static int cmp_key(const void *a, const void *b) { return cmp_u64(a, b); }

/* The open call's far loads become the previous call's (sorted, for far_seen). */
static void far_next_call(emu_t *e) {
  uint64_t *t = e->far_prev;
  size_t cap = e->far_prev_cap;
  e->far_prev = e->far_cur;
  e->far_prev_cap = e->far_cur_cap;
  e->far_prev_n = e->far_cur_n;
  e->far_cur = t;
  e->far_cur_cap = cap;
  e->far_cur_n = 0;
  if (e->far_prev_n) qsort(e->far_prev, e->far_prev_n, sizeof(uint64_t), cmp_key);
}

static void close_call(emu_t *e) {
  if (!e->cf_any) return;
  double f[EMU_FEATURES] = {e->cf_ld_req, e->cf_ld_bytes, e->cf_st_req, e->cf_st_bytes,
                            e->cf_ex_rows, e->cf_ops, e->cf_pre, 0.0, e->cf_block_req, 0.0, 0.0, 0.0};
  double *nf = grow(e->calls_f, &e->calls_cap, e->calls_n + 1, EMU_FEATURES * sizeof(double));
  if (nf) {
    e->calls_f = nf;
    memcpy(e->calls_f + EMU_FEATURES * e->calls_n, f, sizeof f);
    for (int i = 0; i < e->cg_n; i++) {
      struct cgroup *c = &e->cg[i];
      uint64_t prefix = group_prefix(c);
      if (prefix >= e->sg[c->group].stride) continue;
      struct contrib *nc = grow(e->ct, &e->ct_cap, e->ct_n + 1, sizeof *e->ct);
      if (!nc) break;
      e->ct = nc;
      e->ct[e->ct_n++] = (struct contrib){(uint32_t)e->calls_n, c->group, c->req, c->st_req, prefix};
    }
    e->calls_n++;
  }
  e->cf_ld_req = e->cf_ld_bytes = e->cf_st_req = e->cf_st_bytes = 0;
  e->cf_ex_rows = e->cf_ops = e->cf_pre = e->cf_dram_req = e->cf_block_req = 0;
  e->cf_any = 0;
  e->cg_n = 0;
  far_next_call(e);
}

/* Cycles of the calls so far (the open one counted as closed) as the cost model times them, without run_cycles;
 * with `features`, their summed features too. */
static double model_cycles(const emu_t *e, double *features) {
  double total = 0, dma = 0, ex = 0;
  size_t j = 0, jf = 0, n = e->calls_n + (e->cf_any ? 1 : 0);
  if (features) memset(features, 0, EMU_FEATURES * sizeof(double));
  /* each call's DMA and execute, then its cycles with the DMA its execute overlaps (call_total) */
  double *dx = n ? malloc(2 * n * sizeof(double)) : NULL, own = 0;
  for (size_t i = 0; i < n; i++) {
    double f[EMU_FEATURES];
    if (i < e->calls_n) {
      memcpy(f, e->calls_f + EMU_FEATURES * i, sizeof f);
      for (; j < e->ct_n && e->ct[j].call == i; j++)
        if (group_beyond_l2(e, e->ct[j].group) && !group_whole(e, e->ct[j].group, e->ct[j].prefix)) {
          f[7] += e->ct[j].req;
          if (group_beyond_llc(e, e->ct[j].group)) {
            f[9] += e->ct[j].req;
            f[11] += e->ct[j].st_req;
          }
        }
    } else { /* the open call, as it stands */
      double g[EMU_FEATURES] = {e->cf_ld_req, e->cf_ld_bytes, e->cf_st_req, e->cf_st_bytes,
                                e->cf_ex_rows, e->cf_ops, e->cf_pre, 0.0, e->cf_block_req, 0.0, 0.0, 0.0};
      memcpy(f, g, sizeof f);
      for (int k = 0; k < e->cg_n; k++) {
        struct cgroup c = e->cg[k];
        if (group_beyond_l2(e, c.group) && !group_whole(e, c.group, group_prefix(&c))) {
          f[7] += c.req;
          if (group_beyond_llc(e, c.group)) {
            f[9] += c.req;
            f[11] += c.st_req;
          }
        }
      }
    }
    /* loads from tensors whose touched span exceeds the LLC (count_far_load) */
    for (; jf < e->fc_n && e->fc[jf].call == i; jf++) {
      const struct tspan *t = &e->tn[e->fc[jf].tensor];
      if (t->thi > t->tlo && (double)(t->thi - t->tlo) > e->t.llc_bytes) f[10] += e->fc[jf].bytes;
    }
    double d, x;
    call_terms(e, f, &d, &x);
    own += call_total(e, d, x, d);
    if (dx) {
      dx[2 * i] = d;
      dx[2 * i + 1] = x;
    }
    dma += d;
    ex += x;
    if (features)
      for (int k = 0; k < EMU_FEATURES; k++) features[k] += f[k];
  }
  if (n == 0) return 0.0;
  /* (the last call's execute overlaps the first call's DMA, as the model's innermost loop starts again) */
  if (!dx || e->t.call_slots <= 0) {
    total = own; /* (out of memory: each call paired with itself) */
  } else {
    for (size_t i = 0; i < n; i++) total += call_total(e, dx[2 * i], dx[2 * i + 1], dx[2 * ((i + 1) % n)]);
  }
  free(dx);
  double md = dma / n, mx = ex / n;
  double fill = e->t.calls_overlap > 0 ? (1.0 - e->t.overlap_loss) * (md < mx ? md : mx) : 0.0;
  return total + fill;
}

/* The registered buffer holding DRAM address p (-1: none). */
static int region_of(const emu_t *e, uintptr_t p) {
  for (int i = 0; i < e->n_regions; i++)
    if (p >= e->regions[i].base && p < e->regions[i].base + e->regions[i].size) return i;
  return -1;
}

/* Store requests of one mvout that wait behind earlier ones to their 64-byte block (tileplan.cost.gemmini.
 * _store_chain_one, the same expected count): rows closer than a block share blocks, a block's puts are served one
 * after another, and the mvout waits for its longest chain (requests per block, less the first). */
static double store_chain(const emu_t *e, uint32_t rows, uint64_t row_bytes, uint64_t stride) {
  double block = e->t.dma_request_bytes;
  if (rows == 0 || (double)stride >= block) return 0.0;
  double span = ((double)rows - 1.0) * (double)stride + (double)row_bytes;
  double blocks = 1.0 + (span > 1.0 ? span - 1.0 : 0.0) / block;
  double chain = (double)rows / blocks - 1.0;
  return chain > 0 ? chain : 0.0;
}

/* DMA requests of `rows` rows of `row_bytes`, `stride` bytes apart from p: one per 64-byte block each row touches
 * (DMA.scala reads and writes a row as aligned packets of at most 64 B, so a row that starts mid-block takes one
 * more request than an aligned one; tileplan.cost.gemmini._row_req counts the same), at least one per row.  Offsets
 * are taken within the row's buffer (registered buffers start on a page).  A zero-fill (p = 0) moves nothing:
 * its rows count as aligned. */
static double row_requests(const emu_t *e, uintptr_t p, int region, uint32_t rows, uint64_t row_bytes,
                           uint64_t stride) {
  uint64_t block = (uint64_t)e->t.dma_request_bytes;
  if (block == 0) return rows;
  if (!p) {
    double per_row = ceil((double)row_bytes / (double)block);
    return rows * (per_row < 1 ? 1 : per_row);
  }
  uint64_t off = (uint64_t)(p - (region >= 0 ? e->regions[region].base : 0));
  double req = 0;
  for (uint32_t r = 0; r < rows; r++) {
    uint64_t o = (off + (uint64_t)r * stride) % block;
    uint64_t n = (o + row_bytes + block - 1) / block;
    req += n < 1 ? 1 : (double)n;
  }
  return req;
}

/* A transfer's requests (as dram_cycles counts them) and bytes into the open call's features.  Rows narrower than
 * their stride join their (buffer, stride) group: a call whose pieces of such rows leave uncovered columns that the
 * run reads (or writes) at that stride moves a strided tile, whose requests wait on DRAM when the group's span
 * exceeds the L2 (tileplan.cost.gemmini._beyond_l2: a channel tile narrower than the tensor's rows, in a tensor
 * larger than the L2); columns no transfer touches are padding (group_whole). */
/* A load's bytes that DRAM itself reads (tileplan.cost.gemmini: far_bytes): from a tensor (emu_add_tensor; none
 * registered: nothing counted) whose span the run's loads touch exceeds the LLC (rows of a buffer no load reads, such
 * as a copy's padding past its last real row, take no room in it), unless the previous call made the same load (its
 * data is still in the L2). */
static void count_far_load(emu_t *e, uintptr_t p, uint32_t rows, uint64_t row_bytes, uint64_t stride,
                           double moved) {
  int k;
  for (k = 0; k < e->tn_n; k++)
    if (p >= e->tn[k].lo && p < e->tn[k].hi) break;
  if (k == e->tn_n) return;
  { /* the span of the tensor the run's loads touch (rows past the last one read, e.g. a copy's padding, are not) */
    uintptr_t end = p + (stride ? (uintptr_t)(rows - 1) * stride : 0) + row_bytes;
    if (p < e->tn[k].tlo) e->tn[k].tlo = p;
    if (end > e->tn[k].thi) e->tn[k].thi = end;
  }
  if ((double)(e->tn[k].hi - e->tn[k].lo) <= e->t.llc_bytes) return; /* (its touched span cannot exceed it) */
  uint64_t key = (uint64_t)p * 0x9E3779B97F4A7C15ull ^ ((uint64_t)rows << 40) ^ (row_bytes << 20) ^ stride;
  if (e->far_prev_n && bsearch(&key, e->far_prev, e->far_prev_n, sizeof key, cmp_key)) return;
  uint64_t *n = grow(e->far_cur, &e->far_cur_cap, e->far_cur_n + 1, sizeof *n);
  if (n) {
    e->far_cur = n;
    e->far_cur[e->far_cur_n++] = key;
  }
  if (e->fc_n && e->fc[e->fc_n - 1].call == e->calls_n && e->fc[e->fc_n - 1].tensor == k) {
    e->fc[e->fc_n - 1].bytes += moved;
    return;
  }
  struct farc *nf = grow(e->fc, &e->fc_cap, e->fc_n + 1, sizeof *e->fc);
  if (!nf) return;
  e->fc = nf;
  e->fc[e->fc_n++] = (struct farc){(uint32_t)e->calls_n, k, moved};
}

static void count_transfer(emu_t *e, int store, uintptr_t p, uint32_t rows, uint64_t row_bytes, uint64_t stride,
                           double moved) {
  int region = p ? region_of(e, p) : -1;
  double req = row_requests(e, p, region, rows, row_bytes, stride);
  if (store) {
    e->cf_st_req += req;
    e->cf_st_bytes += moved;
    e->cf_block_req += store_chain(e, rows, row_bytes, stride);
  } else {
    e->cf_ld_req += req;
    e->cf_ld_bytes += moved;
    if (p && moved > 0) count_far_load(e, p, rows, row_bytes, stride, moved);
  }
  e->cf_any = 1;
  if (!p || rows < 2 || stride <= row_bytes) return;
  int g;
  for (g = 0; g < e->sg_n; g++)
    if (e->sg[g].region == region && e->sg[g].stride == stride) break;
  uintptr_t hi = p + (uintptr_t)(rows - 1) * stride + row_bytes;
  if (g == e->sg_n) {
    size_t cap = (size_t)e->sg_cap;
    struct sgroup *n = grow(e->sg, &cap, (size_t)e->sg_n + 1, sizeof *e->sg);
    if (!n) return;
    e->sg = n;
    e->sg_cap = (int)cap;
    e->sg[e->sg_n++] = (struct sgroup){region, stride, 0, p, hi};
  } else {
    if (p < e->sg[g].lo) e->sg[g].lo = p;
    if (hi > e->sg[g].hi) e->sg[g].hi = hi;
  }
  { /* the width of the rows that transfers touch (a row's columns from its start; a wrapping transfer: all) */
    uint64_t off = (uint64_t)(p - (region >= 0 ? e->regions[region].base : 0)) % stride;
    uint64_t end = off + row_bytes > stride ? stride : off + row_bytes;
    if (end > e->sg[g].width) e->sg[g].width = end;
  }
  int i;
  for (i = 0; i < e->cg_n; i++)
    if (e->cg[i].group == g) break;
  if (i == e->cg_n) {
    if (e->cg_n == 16) return; /* (a call of more than 16 strided groups: the rest are not counted) */
    e->cg[e->cg_n++] = (struct cgroup){.group = g, .req = 0, .st_req = 0, .n_iv = 0};
  }
  struct cgroup *c = &e->cg[i];
  c->req += req;
  if (store) c->st_req += req;
  if (c->n_iv >= 0) {
    uint64_t off = (uint64_t)(p - (e->sg[g].region >= 0 ? e->regions[e->sg[g].region].base : 0)) % stride;
    uint64_t pieces[4] = {off, off + row_bytes, 0, 0};
    int np = 1;
    if (off + row_bytes > stride) { /* (wraps into the next row: to the end, and from the start) */
      pieces[1] = stride;
      pieces[3] = off + row_bytes - stride;
      np = 2;
    }
    for (int k = 0; k < np && c->n_iv >= 0; k++) {
      /* merged with the intervals it overlaps or touches (a row moved as several mvins of 64-byte pieces) */
      uint64_t a = pieces[2 * k], b = pieces[2 * k + 1];
      for (int m = 0; m < c->n_iv;) {
        if (c->iv[2 * m] <= b && a <= c->iv[2 * m + 1]) {
          if (c->iv[2 * m] < a) a = c->iv[2 * m];
          if (c->iv[2 * m + 1] > b) b = c->iv[2 * m + 1];
          c->n_iv--;
          c->iv[2 * m] = c->iv[2 * c->n_iv];
          c->iv[2 * m + 1] = c->iv[2 * c->n_iv + 1];
          m = 0;
        } else {
          m++;
        }
      }
      if (c->n_iv == 16) {
        c->n_iv = -1;
      } else {
        c->iv[2 * c->n_iv] = a;
        c->iv[2 * c->n_iv + 1] = b;
        c->n_iv++;
      }
    }
  }
}

/* Busy intervals of the two contended resources (0: DMA channel, 1: array): sorted, disjoint; iv_w = 1 for
 * transfers / array work, 0 for time the resource is merely held (call overhead); iv_cum = weighted busy time
 * before each interval. */
/* The first index i of the ascending a[0..n) with a[i] >= x (or_equal) or a[i] > x, n if none. The timing model
 * asks mostly about times near the end of the run so far, so it is searched from the end (steps doubling back
 * until an element is not past x, then bisected), not from the middle of every interval of the run. */
static size_t first_from_end(const double *a, size_t n, double x, int or_equal) {
#define PAST(v) (or_equal ? (v) >= x : (v) > x)
  if (!n || !PAST(a[n - 1])) return n;
  size_t lo = 0, hi = n - 1; /* a[hi] is past x */
  for (size_t step = 1; step <= hi; step *= 2) {
    if (!PAST(a[hi - step])) { lo = hi - step + 1; break; }
    hi -= step;
  }
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (PAST(a[mid])) hi = mid; else lo = mid + 1;
  }
  return lo;
#undef PAST
}

static double busy_before(emu_t *e, int r, double x) {
  size_t n = e->iv_n[r];
  if (!n || x <= e->iv_start[r][0]) return 0.0;
  size_t lo = first_from_end(e->iv_start[r], n, x, 1) - 1; /* the last interval with start < x (the first does) */
  double in = x < e->iv_end[r][lo] ? x - e->iv_start[r][lo] : e->iv_end[r][lo] - e->iv_start[r][lo];
  return e->iv_cum[r][lo] + e->iv_w[r][lo] * in;
}

static void insert_busy(emu_t *e, int r, size_t at, double a, double b, double w) {
  if (e->iv_n[r] == e->iv_cap[r]) {
    size_t cap = e->iv_cap[r] ? 2 * e->iv_cap[r] : 4096;
    e->iv_start[r] = realloc(e->iv_start[r], cap * sizeof(double));
    e->iv_end[r] = realloc(e->iv_end[r], cap * sizeof(double));
    e->iv_cum[r] = realloc(e->iv_cum[r], cap * sizeof(double));
    e->iv_w[r] = realloc(e->iv_w[r], cap * sizeof(double));
    if (!e->iv_start[r] || !e->iv_end[r] || !e->iv_cum[r] || !e->iv_w[r]) {
      fprintf(stderr, "gemmini emulator: out of memory\n");
      abort();
    }
    e->iv_cap[r] = cap;
  }
  size_t n = e->iv_n[r], tail = n - at;
  memmove(e->iv_start[r] + at + 1, e->iv_start[r] + at, tail * sizeof(double));
  memmove(e->iv_end[r] + at + 1, e->iv_end[r] + at, tail * sizeof(double));
  memmove(e->iv_w[r] + at + 1, e->iv_w[r] + at, tail * sizeof(double));
  memmove(e->iv_cum[r] + at + 1, e->iv_cum[r] + at, tail * sizeof(double));
  e->iv_start[r][at] = a;
  e->iv_end[r][at] = b;
  e->iv_w[r][at] = w;
  e->iv_n[r] = n + 1;
  for (size_t i = at; i <= n; i++)
    e->iv_cum[r][i] = i ? e->iv_cum[r][i - 1] + e->iv_w[r][i - 1] * (e->iv_end[r][i - 1] - e->iv_start[r][i - 1]) : 0.0;
}

/* Stretch of an operation [t, t + dur) on resource r by its overlap with the other resource's work. */
static double stretched(emu_t *e, int r, double t, double dur, int push) {
  double L = e->t.overlap_loss;
  if (L <= 0 || dur <= 0) return dur;
  int o = 1 - r;
  double ov = busy_before(e, o, t + dur) - busy_before(e, o, t);
  if (ov > 0 && push && o == 1) e->unit_free[U_EXEC] += L * ov; /* the array slows down as much */
  return dur + L * ov;
}

/* The array: in order, so its work is appended. */
static double exec_op(emu_t *e, double t, double dur) {
  dur = stretched(e, 1, t, dur, 0);
  if (dur > 0) insert_busy(e, 1, e->iv_n[1], t, t + dur, 1.0);
  return dur;
}

/* The DMA channel: the earliest gap at or after `ready` that holds the (stretched) transfer, so loads run in
 * front of a store that waits for the array.  Returns the start; *dur gets the stretched length. */
static double dma_op(emu_t *e, double ready, double *dur, double weight) {
  size_t n = e->iv_n[0];
  size_t i = first_from_end(e->iv_end[0], n, ready, 0); /* the first interval ending after ready */
  double s = ready;
  for (;;) {
    if (i < n && e->iv_start[0][i] < s) s = e->iv_end[0][i] > s ? e->iv_end[0][i] : s;
    double d = weight > 0 ? stretched(e, 0, s, *dur, 0) : *dur;
    if (i >= n || e->iv_start[0][i] >= s + d) {
      if (weight > 0) d = stretched(e, 0, s, *dur, 1);
      *dur = d;
      if (d > 0) insert_busy(e, 0, i, s, s + d, weight);
      return s;
    }
    s = e->iv_end[0][i] > s ? e->iv_end[0][i] : s;
    i++;
  }
}

/* Dispatch: the host issues in order; an instruction whose unit queue is full waits for that unit's oldest
 * entry to complete (and so do all instructions after it). */
static double dispatch_unit(emu_t *e, int unit) {
  double t = e->t_dispatch + e->t.issue_cycles;
  if (unit >= 0 && e->ring_n[unit]) {
    uint64_t i = e->unit_count[unit];
    if (i >= e->ring_n[unit]) {
      double oldest = e->ring[unit][i % e->ring_n[unit]];
      if (oldest > t) t = oldest;
    }
  }
  e->t_dispatch = t;
  e->cur_unit = unit;
  return t;
}

static void retire(emu_t *e, double complete) {
  if (complete > e->max_complete) e->max_complete = complete;
  int u = e->cur_unit;
  if (u >= 0 && e->ring_n[u]) {
    e->ring[u][e->unit_count[u] % e->ring_n[u]] = complete;
    e->unit_count[u]++;
  }
}

/* Hazard helpers: wait for rows read (RAW) / written (WAR, WAW) by other units. */
static double wait_read(emu_t *e, int unit, uint32_t addr, uint32_t rows, uint32_t stride, double t) {
  if (is_garbage(addr) || rows == 0) return t;
  double *wd = is_acc(addr) ? e->acc_wdone : e->spad_wdone;
  int8_t *wu = is_acc(addr) ? e->acc_wunit : e->spad_wunit;
  uint32_t b = row_of(addr);
  for (uint32_t r = 0; r < rows; r++) {
    uint32_t row = b + r * stride;
    if (wu[row] != unit && wd[row] > t) t = wd[row];
  }
  return t;
}

static double wait_write(emu_t *e, int unit, uint32_t addr, uint32_t rows, double t) {
  if (is_garbage(addr) || rows == 0) return t;
  double *wd = is_acc(addr) ? e->acc_wdone : e->spad_wdone;
  double *rd = is_acc(addr) ? e->acc_rdone : e->spad_rdone;
  int8_t *wu = is_acc(addr) ? e->acc_wunit : e->spad_wunit;
  uint32_t b = row_of(addr);
  for (uint32_t r = 0; r < rows; r++) {
    uint32_t row = b + r;
    if (rd[row] > t) t = rd[row];
    if (wu[row] != unit && wd[row] > t) t = wd[row];
  }
  return t;
}

static void mark_read(emu_t *e, uint32_t addr, uint32_t rows, uint32_t stride, double done) {
  if (is_garbage(addr)) return;
  double *rd = is_acc(addr) ? e->acc_rdone : e->spad_rdone;
  uint32_t b = row_of(addr);
  for (uint32_t r = 0; r < rows; r++)
    if (rd[b + r * stride] < done) rd[b + r * stride] = done;
}

static void mark_write(emu_t *e, int unit, uint32_t addr, uint32_t rows, double done) {
  if (is_garbage(addr)) return;
  double *wd = is_acc(addr) ? e->acc_wdone : e->spad_wdone;
  int8_t *wu = is_acc(addr) ? e->acc_wunit : e->spad_wunit;
  uint32_t b = row_of(addr);
  for (uint32_t r = 0; r < rows; r++) {
    if (wd[b + r] < done) wd[b + r] = done;
    wu[b + r] = (int8_t)unit;
  }
}

static void begin(emu_t *e, int op) {
  e->cur_op = op;
  e->st.instructions++;
  e->st.counts[op]++;
}

/* Run a one-unit operation with no row traffic (config, flush). */
static void simple_op(emu_t *e, int unit, double cycles) {
  double t = dispatch_unit(e, unit);
  if (e->unit_free[unit] > t) t = e->unit_free[unit];
  e->unit_free[unit] = t + cycles;
  e->st.busy[unit] += cycles;
  retire(e, t + cycles);
}

/* ------------------------------------------------------------------------------------------------ */
/* Row access                                                                                       */

static void need_written(emu_t *e, uint32_t addr, uint32_t row, const char *what) {
  uint8_t *w = is_acc(addr) ? e->acc_written : e->spad_written;
  if (!w[row])
    trap(e, "%s reads %s row %u, which was never written", what, is_acc(addr) ? "accumulator" : "scratchpad",
         row);
}

/* Write `cols` int32 values into local row `row` of the memory selected by addr. */
static void write_row(emu_t *e, uint32_t addr, uint32_t row, const int64_t *vals, uint32_t cols, int act,
                      int shift, const char *what) {
  uint32_t D = e->dim;
  if (is_acc(addr)) {
    int32_t *dst = e->acc + (size_t)row * D;
    if (is_accumulate(addr)) {
      if (!e->acc_written[row]) trap(e, "%s accumulates into accumulator row %u, which was never written", what, row);
      for (uint32_t c = 0; c < cols; c++) dst[c] = wrap_add(dst[c], (int32_t)vals[c]);
    } else {
      for (uint32_t c = 0; c < D; c++) dst[c] = c < cols ? (int32_t)vals[c] : 0;
    }
    e->acc_written[row] = 1;
  } else {
    int8_t *dst = e->spad + (size_t)row * D;
    for (uint32_t c = 0; c < D; c++) {
      if (c < cols) {
        int64_t v = rounding_shift(vals[c], shift);
        if (act == RELU && v < 0) v = 0;
        dst[c] = sat8(v);
      } else {
        dst[c] = 0;
      }
    }
    e->spad_written[row] = 1;
  }
}

/* An operand the execute unit reads from the accumulator passes the accumulator's scale unit as an mvout's
 * rows do, with config_ex's activation and acc_scale (Gemmini's ExecuteController sets the read request's act
 * and scale from config_ex, its `full` bit false; AccumulatorScale applies the activation, then the float
 * scale rounding half to even, then clips to the int8 input type): the array multiplies int8. */
static int32_t ex_acc_read(emu_t *e, int32_t x) {
  int64_t v = x;
  if (e->sys_act == RELU && v < 0) v = 0;
  if (e->ex_acc_scale != 1.0f) v = scale_rne(v, e->ex_acc_scale);
  return sat8(v);
}

/* Read an operand block (rows x cols at addr, row stride `stride`) into a DIM x DIM int32 block. */
static void read_block(emu_t *e, uint32_t addr, uint32_t rows, uint32_t cols, uint32_t stride, int transpose,
                       int32_t *blk, const char *what) {
  uint32_t D = e->dim;
  if (is_garbage(addr)) {
    memset(blk, 0, sizeof(int32_t) * D * D);
    return;
  }
  if (rows > D || cols > D) trap(e, "%s block %ux%u exceeds DIM=%u", what, rows, cols, D);
  check_rows(e, addr, rows, stride, what);
  uint32_t b = row_of(addr);
  const int acc = is_acc(addr);
  if (!acc && !transpose && cols == D) /* the rows read fill theirs whole: zeros below them only */
    memset(blk + (size_t)rows * D, 0, sizeof(int32_t) * D * (D - rows));
  else
    memset(blk, 0, sizeof(int32_t) * D * D);
  for (uint32_t r = 0; r < rows; r++) {
    uint32_t row = b + r * stride;
    need_written(e, addr, row, what);
    if (!acc && !transpose) { /* the common case, a loop the compiler vectorises */
      widen_row(blk + r * D, e->spad + (size_t)row * D, cols);
      continue;
    }
    for (uint32_t c = 0; c < cols; c++) {
      int32_t v = acc ? ex_acc_read(e, e->acc[(size_t)row * D + c]) : (int32_t)e->spad[(size_t)row * D + c];
      if (transpose)
        blk[c * D + r] = v;
      else
        blk[r * D + c] = v;
    }
  }
}

/* ------------------------------------------------------------------------------------------------ */
/* DMA not yet fenced: deferred mvout rows, protected pages, the fault handler                      */

static region_t *region_at(emu_t *e, uintptr_t p, int *index) {
  for (int i = 0; i < e->n_regions; i++) {
    region_t *r = &e->regions[i];
    if (p >= r->base && p < r->base + r->size) {
      if (index) *index = i;
      return r;
    }
  }
  return NULL;
}

/* Emulators with protected pages, for the fault handler (which must not allocate or lock). */
#define MAX_GUARDED 64
static emu_t *volatile g_guarded[MAX_GUARDED];
static struct sigaction g_prev_segv;

static void on_segv(int sig, siginfo_t *si, void *uctx);

static void guarded_add(emu_t *e) {
  struct sigaction cur;
  sigaction(SIGSEGV, NULL, &cur);
  if (!(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != on_segv) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK; /* an alternate stack where the thread has one */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &g_prev_segv) != 0) return;
  }
  for (int i = 0; i < MAX_GUARDED; i++)
    if (g_guarded[i] == e) return;
  for (int i = 0; i < MAX_GUARDED; i++)
    if (__sync_bool_compare_and_swap(&g_guarded[i], NULL, e)) return;
}

static void guarded_remove(emu_t *e) {
  for (int i = 0; i < MAX_GUARDED; i++) __sync_bool_compare_and_swap(&g_guarded[i], e, NULL);
}

static size_t page_hash(const emu_t *e, uintptr_t pg) {
  return (size_t)((pg / e->page_size) * 0x9E3779B97F4A7C15ull) & (e->page_cap - 1);
}

/* Read-only lookup (the fault handler uses it). */
static page_slot_t *page_find(const emu_t *e, uintptr_t pg) {
  if (!e->page_cap) return NULL;
  for (size_t i = page_hash(e, pg);; i = (i + 1) & (e->page_cap - 1)) {
    if (e->pages[i].page == pg) return &e->pages[i];
    if (e->pages[i].page == 0) return NULL;
  }
}

static page_slot_t *page_insert(emu_t *e, uintptr_t pg) {
  page_slot_t *s = page_find(e, pg);
  if (s) return s;
  if (2 * (e->page_n + 1) > e->page_cap) { /* grow to keep the table at most half full */
    size_t cap = e->page_cap ? 2 * e->page_cap : 1024;
    page_slot_t *old = e->pages, *fresh = calloc(cap, sizeof *fresh);
    size_t old_cap = e->page_cap;
    if (!fresh) return NULL;
    e->pages = fresh;
    e->page_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
      if (old[i].page) {
        size_t j = page_hash(e, old[i].page);
        while (fresh[j].page) j = (j + 1) & (cap - 1);
        fresh[j] = old[i];
      }
    free(old);
  }
  size_t j = page_hash(e, pg);
  while (e->pages[j].page) j = (j + 1) & (e->page_cap - 1);
  e->pages[j].page = pg;
  e->pages[j].state = PG_OPEN;
  if (e->page_n++ == 0) guarded_add(e);
  return &e->pages[j];
}

/* Raise a page's protection to `state` (never lower it, never touch a released page). */
static void page_guard(emu_t *e, uintptr_t pg, int state) {
  page_slot_t *s = page_insert(e, pg);
  if (!s || s->state == PG_RELEASED || s->state >= state) return;
  if (mprotect((void *)pg, e->page_size, state == PG_READ_ONLY ? PROT_READ : PROT_NONE) != 0)
    s->state = PG_RELEASED; /* cannot protect it: leave it unwatched */
  else
    s->state = (uint8_t)state;
}

static uintptr_t page_of(const emu_t *e, uintptr_t a) { return a & ~(e->page_size - 1); }

/* Protect the pages the rows of a transfer touch (in guardable regions only). */
static void guard_rows(emu_t *e, uintptr_t base, uint64_t stride, uint64_t row_bytes, uint32_t rows, int state) {
  for (uint32_t r = 0; r < rows; r++) {
    uintptr_t lo = base + r * stride, hi = lo + row_bytes;
    region_t *reg = region_at(e, lo, NULL);
    if (!reg || !reg->guardable) continue;
    for (uintptr_t pg = page_of(e, lo); pg < hi; pg += e->page_size) page_guard(e, pg, state);
  }
}

static dma_rec_t *pend_add(emu_t *e, dma_list_t *l, int op, uintptr_t base, uint64_t stride, uint64_t row_bytes,
                           uint32_t rows) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 1024;
    dma_rec_t *v = realloc(l->v, cap * sizeof *v);
    if (!v) {
      fprintf(stderr, "gemmini emulator: out of memory\n");
      abort();
    }
    l->v = v;
    l->cap = cap;
  }
  dma_rec_t *r = &l->v[l->n++];
  r->base = base;
  r->stride = stride;
  r->row_bytes = row_bytes;
  r->rows = rows;
  r->op = op;
  r->index = (int64_t)e->st.instructions - 1;
  r->data = 0;
  return r;
}

/* Does the transfer touch byte a? */
static int rec_has(const dma_rec_t *r, uintptr_t a) {
  if (a < r->base) return 0;
  uint64_t off = a - r->base;
  if (r->stride == 0 || r->rows == 1) return off < r->row_bytes;
  if (off >= (uint64_t)(r->rows - 1) * r->stride + r->row_bytes) return 0;
  if (r->stride <= r->row_bytes) return 1; /* the rows abut or overlap: one contiguous span */
  return off % r->stride < r->row_bytes && off / r->stride < r->rows;
}

/* Does the transfer touch any byte of [lo, hi)? */
static int rec_overlaps(const dma_rec_t *r, uintptr_t lo, uintptr_t hi) {
  uint32_t n = r->stride == 0 ? 1 : r->rows;
  for (uint32_t i = 0; i < n; i++) {
    uintptr_t a = r->base + i * r->stride, b = a + r->row_bytes;
    if (a < hi && lo < b) return 1;
  }
  return 0;
}

static const dma_rec_t *pend_find(const dma_list_t *l, uintptr_t a) {
  for (size_t i = l->n; i-- > 0;)
    if (rec_has(&l->v[i], a)) return &l->v[i];
  return NULL;
}

/* An mvout's rows, kept until the fence; returns where to put them (rows x row_bytes). */
static uint8_t *pend_write(emu_t *e, int op, uintptr_t base, uint64_t stride, uint64_t row_bytes, uint32_t rows) {
  size_t need = (size_t)rows * row_bytes;
  if (e->pend_data_n + need > e->pend_data_cap) {
    size_t cap = e->pend_data_cap ? e->pend_data_cap : 1 << 16;
    while (cap < e->pend_data_n + need) cap *= 2;
    uint8_t *d = realloc(e->pend_data, cap);
    if (!d) {
      fprintf(stderr, "gemmini emulator: out of memory\n");
      abort();
    }
    e->pend_data = d;
    e->pend_data_cap = cap;
  }
  dma_rec_t *r = pend_add(e, &e->pend_out, op, base, stride, row_bytes, rows);
  r->data = e->pend_data_n;
  e->pend_data_n += need;
  guard_rows(e, base, stride, row_bytes, rows, PG_NO_ACCESS);
  return e->pend_data + r->data;
}

/* Pages an mvin's read opened for the emulator itself (they also hold un-fenced mvout rows), to close again. */
#define MAX_TEMP_OPEN 256
static uintptr_t g_temp_open[MAX_TEMP_OPEN];
static int g_n_temp_open;

/* Before an mvin reads DRAM: trap if it reads what an un-fenced mvout writes (Gemmini orders its loads and
 * stores by local addresses only), make pages that hold other mvouts' rows readable for the read. */
static void watch_read(emu_t *e, int op, uintptr_t base, uint64_t stride, uint64_t row_bytes, uint32_t rows) {
  g_n_temp_open = 0;
  for (uint32_t r = 0; r < rows; r++) {
    uintptr_t lo = base + r * stride, hi = lo + row_bytes;
    for (uintptr_t pg = page_of(e, lo); pg < hi; pg += e->page_size) {
      page_slot_t *s = page_find(e, pg);
      if (!s || s->state != PG_NO_ACCESS) continue;
      for (size_t i = 0; i < e->pend_out.n; i++)
        if (rec_overlaps(&e->pend_out.v[i], lo, hi))
          trap(e, "reads DRAM at %p that mvout instruction #%lld writes, with no gemmini_fence() between them "
               "(Gemmini orders its loads and stores by local addresses only)", (void *)lo,
               (long long)e->pend_out.v[i].index);
      if (g_n_temp_open < MAX_TEMP_OPEN && mprotect((void *)pg, e->page_size, PROT_READ) == 0)
        g_temp_open[g_n_temp_open++] = pg;
      else {
        s->state = PG_RELEASED;
        mprotect((void *)pg, e->page_size, PROT_READ | PROT_WRITE);
      }
    }
  }
  pend_add(e, &e->pend_in, op, base, stride, row_bytes, rows);
}

/* After the mvin's read: close the pages opened for it, protect what it read against CPU writes. */
static void watch_read_done(emu_t *e) {
  for (int i = 0; i < g_n_temp_open; i++) mprotect((void *)g_temp_open[i], e->page_size, PROT_NONE);
  g_n_temp_open = 0;
  const dma_rec_t *r = &e->pend_in.v[e->pend_in.n - 1];
  guard_rows(e, r->base, r->stride, r->row_bytes, r->stride == 0 ? 1 : r->rows, PG_READ_ONLY);
}

/* End of an epoch (a fence, a trap, a reset): open every protected page, then (`apply`) let the deferred mvout
 * rows reach DRAM in program order. */
static void release_dma(emu_t *e, int apply) {
  for (size_t i = 0; i < e->page_cap; i++) {
    page_slot_t *s = &e->pages[i];
    if (s->page && (s->state == PG_READ_ONLY || s->state == PG_NO_ACCESS))
      mprotect((void *)s->page, e->page_size, PROT_READ | PROT_WRITE);
  }
  if (e->page_n) memset(e->pages, 0, e->page_cap * sizeof *e->pages);
  e->page_n = 0;
  guarded_remove(e);
  if (apply)
    for (size_t i = 0; i < e->pend_out.n; i++) {
      const dma_rec_t *r = &e->pend_out.v[i];
      for (uint32_t k = 0; k < r->rows; k++)
        memcpy((void *)(r->base + k * r->stride), e->pend_data + r->data + k * r->row_bytes, r->row_bytes);
    }
  e->pend_in.n = e->pend_out.n = 0;
  e->pend_data_n = 0;
}

/* A CPU access faulted on a protected page.  Returns 1 if it was one of e's pages (handled), 0 if not. */
static int cpu_fault(emu_t *e, uintptr_t a, int is_write, int write_known) {
  page_slot_t *s = page_find(e, page_of(e, a));
  if (!s || s->state == PG_OPEN) return 0;
  if (s->state == PG_RELEASED) return 1; /* opened meanwhile (another thread): retry */
  if (s->state == PG_READ_ONLY) is_write = 1, write_known = 1; /* only a write faults there */
  const dma_rec_t *hit = pend_find(&e->pend_out, a);
  const char *what = !write_known ? "access" : is_write ? "write" : "read";
  if (!hit && is_write) hit = pend_find(&e->pend_in, a);
  if (!hit) { /* the page only shares memory with the transfers: open it until the fence */
    mprotect((void *)s->page, e->page_size, PROT_READ | PROT_WRITE);
    s->state = PG_RELEASED;
    return 1;
  }
  int idx = -1;
  region_t *reg = region_at(e, a, &idx);
  if (!e->trapped) {
    e->trapped = 1;
    e->trap_index = hit->index;
    e->trap_op = hit->op;
    snprintf(e->trap_msg, sizeof e->trap_msg,
             "instruction #%lld (%s): CPU %s of DRAM at %p (buffer #%d, byte %llu) that this %s %s, before a "
             "gemmini_fence(): Gemmini's DMA runs decoupled from the CPU, only a fence makes it safe",
             (long long)hit->index, OP_NAMES[hit->op], what, (void *)a, idx,
             reg ? (unsigned long long)(a - reg->base) : 0ull, OP_NAMES[hit->op],
             hit->op == OP_MVOUT ? "writes" : "reads");
  }
  if (e->jb && pthread_equal(pthread_self(), e->run_thread)) siglongjmp(*e->jb, 1); /* ends the run */
  /* outside a run (or on another thread): the trap is recorded; let the access go on */
  mprotect((void *)s->page, e->page_size, PROT_READ | PROT_WRITE);
  s->state = PG_RELEASED;
  return 1;
}

static void on_segv(int sig, siginfo_t *si, void *uctx) {
  uintptr_t a = (uintptr_t)si->si_addr;
  int is_write = 0, write_known = 0;
#if defined(__x86_64__)
  is_write = (((ucontext_t *)uctx)->uc_mcontext.gregs[REG_ERR] & 2) != 0; /* page-fault error code: W bit */
  write_known = 1;
#endif
  for (int i = 0; i < MAX_GUARDED; i++) {
    emu_t *e = g_guarded[i];
    if (e && cpu_fault(e, a, is_write, write_known)) return;
  }
  /* not ours: whoever handled SIGSEGV before */
  if (g_prev_segv.sa_flags & SA_SIGINFO) {
    if (g_prev_segv.sa_sigaction) {
      g_prev_segv.sa_sigaction(sig, si, uctx);
      return;
    }
  } else if (g_prev_segv.sa_handler != SIG_DFL && g_prev_segv.sa_handler != SIG_IGN) {
    g_prev_segv.sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL); /* the access runs again and takes the default action */
}

/* Which mapping holds an address: Linux's PROCMAP_QUERY ioctl on /proc/self/maps (6.11 and later) answers for one
 * address without the kernel formatting every line of the file (a process with TVM loaded has ~480 mappings:
 * 0.5 ms of CPU per read, and emu_add_region read it twice per region, 8 times per accelerator call of a
 * program).  The UAPI's struct procmap_query (<linux/fs.h>), spelled out for older headers. */
struct emu_procmap_query {
  uint64_t size, query_flags, query_addr, vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
  uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
  uint64_t vma_name_addr, build_id_addr;
};
#define EMU_PROCMAP_QUERY _IOWR('f', 17, struct emu_procmap_query)
enum { EMU_VMA_R = 1, EMU_VMA_W = 2, EMU_VMA_X = 4 }; /* its vma_flags: readable, writable, executable */

/* The mapping covering `addr` ([*lo, *hi), EMU_VMA_* in *flags), asked of `fd` (/proc/self/maps): 1; 0 when no
 * mapping covers it; -1 when the kernel cannot say (no PROCMAP_QUERY: read the file instead). */
static int vma_at(int fd, uintptr_t addr, uintptr_t *lo, uintptr_t *hi, unsigned *flags) {
#ifdef EMU_NO_PROCMAP_QUERY /* (as on a kernel without it: tests/codegen/test_emu_regions.py) */
  return -1;
#endif
  struct emu_procmap_query q;
  memset(&q, 0, sizeof q);
  q.size = sizeof q;
  q.query_addr = addr;
  if (ioctl(fd, EMU_PROCMAP_QUERY, &q) != 0) return errno == ENOENT ? 0 : -1;
  *lo = (uintptr_t)q.vma_start;
  *hi = (uintptr_t)q.vma_end;
  *flags = (unsigned)q.vma_flags;
  return 1;
}

/* Is [lo, hi) ordinary read-write, non-executable memory (so its protection may be changed and restored)?  Every
 * byte in a mapping that is readable, writable and not executable (consecutive mappings, no gap). */
static int plain_rw_memory(uintptr_t lo, uintptr_t hi) {
  FILE *f = fopen("/proc/self/maps", "re");
  if (!f) return 0;
  uintptr_t covered = lo, a, b;
  unsigned flags;
  int got = 1;
  while (covered < hi && (got = vma_at(fileno(f), covered, &a, &b, &flags)) == 1) {
    if ((flags & (EMU_VMA_R | EMU_VMA_W | EMU_VMA_X)) != (EMU_VMA_R | EMU_VMA_W)) break;
    covered = b;
  }
  if (covered >= hi || got >= 0) {
    fclose(f);
    return covered >= hi;
  }
  /* without PROCMAP_QUERY: the file's lines, "lo-hi perms ...", in address order */
  char line[512];
  covered = lo;
  while (covered < hi && fgets(line, sizeof line, f)) {
    unsigned long la, lb;
    char perms[8] = {0};
    if (sscanf(line, "%lx-%lx %7s", &la, &lb, perms) != 3) continue;
    if (lb <= covered || la > covered) continue;
    if (perms[0] != 'r' || perms[1] != 'w' || perms[2] == 'x') break;
    covered = lb;
  }
  fclose(f);
  return covered >= hi;
}

extern void *__libc_stack_end __attribute__((weak)); /* glibc's: the initial thread's stack at program start */

/* main_stack_overlaps: 1 / 0 as pthread_getattr_np's stack of the calling thread overlaps [lo, hi) or not, for a
 * range of mapped memory (no gap; emu_add_region asks only of plain_rw_memory's ranges), when the calling thread
 * is glibc's initial thread; -1 when it cannot say so cheaply (not that thread, no glibc, no PROCMAP_QUERY).
 *   There glibc reads /proc/self/maps up to the mapping V = [from, to) that holds __libc_stack_end, and its stack
 * is [end - S, end) with end = the page after __libc_stack_end's, S = (RLIMIT_STACK's soft limit - (to - end))
 * rounded down to pages (unsigned), cut to end - last_to, the end of the mapping before V.  Nothing is mapped
 * between last_to and from, so for mapped [lo, hi) the overlap is the overlap with [max(from, end - S), end),
 * which needs V alone. */
static int main_stack_overlaps(uintptr_t lo, uintptr_t hi) {
  if (&__libc_stack_end == NULL || getpid() != gettid()) return -1;
  uintptr_t sp = (uintptr_t)__libc_stack_end, from, to;
  unsigned flags;
  FILE *f = fopen("/proc/self/maps", "re");
  if (!f) return -1;
  int got = vma_at(fileno(f), sp, &from, &to, &flags);
  fclose(f);
  uintptr_t here = (uintptr_t)&flags; /* on the initial thread's stack, unless this process was forked by another */
  if (got != 1 || here < from || here >= to) return -1;
  struct rlimit rl;
  if (getrlimit(RLIMIT_STACK, &rl) != 0) return 1; /* (pthread_getattr_np fails: on_my_stack says 1) */
  uintptr_t pagesz = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t end = (sp & -pagesz) + pagesz;
  uintptr_t size = ((uintptr_t)rl.rlim_cur - (to - end)) & -pagesz;
  uintptr_t bottom = size >= end - from ? from : end - size;
  return lo < end && bottom < hi;
}

/* Does [lo, hi) overlap the calling thread's stack?  (A buffer there, e.g. a small temporary a compiler put on
 * the stack, is never protected: the stack must stay writable, if only for delivering the fault signal.)  For
 * mapped memory only (main_stack_overlaps). */
static int on_my_stack(uintptr_t lo, uintptr_t hi) {
  int known = main_stack_overlaps(lo, hi);
  if (known >= 0) return known;
  pthread_attr_t attr;
  void *addr;
  size_t size;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return 1;
  int ok = pthread_attr_getstack(&attr, &addr, &size) == 0;
  pthread_attr_destroy(&attr);
  if (!ok) return 1;
  return lo < (uintptr_t)addr + size && (uintptr_t)addr < hi;
}

/* ------------------------------------------------------------------------------------------------ */
/* The API                                                                                          */

/* Each op_* runs one instruction on e; its caller has counted it (begin). */
static void op_config_ex(emu_t *e, int dataflow, int sys_act, int sys_shift, uint32_t A_stride, int A_transpose,
                         int B_transpose) {
  if (dataflow != OUTPUT_STATIONARY && dataflow != WEIGHT_STATIONARY) trap(e, "unknown dataflow %d", dataflow);
  if (sys_act != NO_ACTIVATION && sys_act != RELU) trap(e, "unsupported activation %d", sys_act);
  if (sys_shift < 0 || sys_shift > 31) trap(e, "shift %d out of range", sys_shift);
  if (A_stride == 0) trap(e, "A_stride must be at least 1");
  e->dataflow = dataflow;
  e->sys_act = sys_act;
  e->sys_shift = sys_shift;
  e->a_stride = A_stride;
  e->a_tr = A_transpose;
  e->b_tr = B_transpose;
  /* opens a call: the host issues calls no faster than one per call_floor_cycles (it sets each up while the
   * previous one runs); the execute unit and, in order with the loads, the DMA channel each pay call_cycles */
  close_call(e);
  e->cf_any = 1; /* a call, even one that moves nothing, lasts its floor */
  double c = e->t.call_cycles;
  double t = dispatch_unit(e, U_EXEC);
  if (e->last_call >= 0 && e->last_call + e->t.call_floor_cycles > t) {
    t = e->last_call + e->t.call_floor_cycles;
    e->t_dispatch = t;
  }
  e->last_call = t;
  double tx = e->unit_free[U_EXEC] > t ? e->unit_free[U_EXEC] : t;
  e->unit_free[U_EXEC] = tx + c;
  e->st.busy[U_EXEC] += c;
  if (c > 0) insert_busy(e, 1, e->iv_n[1], tx, tx + c, 0.0);
  double td = e->unit_free[U_LOAD] > t ? e->unit_free[U_LOAD] : t;
  double dc = c;
  td = dma_op(e, td, &dc, 0.0);
  e->unit_free[U_LOAD] = td + c;
  retire(e, (tx > td ? tx : td) + c);
}

static void op_config_ld(emu_t *e, uint64_t stride, float scale, int shrunk, uint32_t block_mvin_stride, int id) {
  if (id < 0 || id > 2) trap(e, "load channel id %d (must be 0, 1 or 2)", id);
  if (!(scale == scale)) trap(e, "scale is NaN");
  e->ld[id].stride = stride;
  e->ld[id].scale = scale;
  e->ld[id].shrunk = shrunk;
  e->ld[id].block_stride = block_mvin_stride;
  simple_op(e, U_LOAD, e->t.config_cycles);
}

static void op_config_st(emu_t *e, uint64_t stride, int acc_act, float acc_scale) {
  if (acc_act != NO_ACTIVATION && acc_act != RELU) trap(e, "unsupported activation %d", acc_act);
  if (!(acc_scale == acc_scale)) trap(e, "scale is NaN");
  e->st_stride = stride;
  e->st_act = acc_act;
  e->st_scale = acc_scale;
  simple_op(e, U_STORE, e->t.config_cycles);
}

static void op_mvin(emu_t *e, int ch, int op, const void *dram_addr, uint32_t addr, uint32_t cols, uint32_t rows) {
  uint32_t D = e->dim;
  ld_cfg_t *cfg = &e->ld[ch];
  const char *what = OP_NAMES[op];
  if (is_garbage(addr)) trap(e, "destination is the garbage address");
  if (rows == 0 || cols == 0) trap(e, "empty transfer (%u rows x %u cols)", rows, cols);
  if (rows > D) trap(e, "%u rows exceed DIM=%u", rows, D);
  uintptr_t p = (uintptr_t)dram_addr;
  uint64_t row_bytes;
  uint32_t nblocks;
  if (is_acc(addr)) {
    if (is_full(addr)) trap(e, "read-full bit set on a mvin destination");
    if (cols > D) trap(e, "%u accumulator columns exceed DIM=%u", cols, D);
    check_rows(e, addr, rows, 1, what);
    row_bytes = (uint64_t)cols * (cfg->shrunk ? 1 : 4);
    nblocks = 1;
  } else {
    if (cols > D * e->max_mvin_blocks)
      trap(e, "%u scratchpad columns exceed %u (%u blocks of DIM)", cols, D * e->max_mvin_blocks, e->max_mvin_blocks);
    nblocks = (cols + D - 1) / D;
    if (nblocks > 1 && cfg->block_stride < rows)
      trap(e, "block_mvin_stride %u smaller than %u rows: blocks overlap", cfg->block_stride, rows);
    for (uint32_t b = 0; b < nblocks; b++) check_rows(e, addr + b * cfg->block_stride, rows, 1, what);
    row_bytes = cols;
  }
  int zero = p == 0; /* Gemmini's zero-fill: a load from address 0 writes zero rows and reads nothing */
  uint32_t drows = cfg->stride == 0 ? 1 : rows; /* DRAM rows read (a stride-0 load reads one row) */
  if (!zero) {
    for (uint32_t r = 0; r < rows; r++) check_dram(e, p + r * cfg->stride, row_bytes, 0);
    watch_read(e, op, p, cfg->stride, row_bytes, drows); /* traps on DRAM an un-fenced mvout writes */
  }

  /* timing */
  double t = dispatch_unit(e, U_LOAD);
  if (e->unit_free[U_LOAD] > t) t = e->unit_free[U_LOAD];
  for (uint32_t b = 0; b < nblocks; b++) {
    uint32_t a = is_acc(addr) ? addr : addr + b * cfg->block_stride;
    t = wait_write(e, U_LOAD, a, rows, t);
  }
  double moved = zero ? 0.0 : (cfg->stride == 0 ? (double)row_bytes : (double)rows * row_bytes);
  double dur = dram_cycles(e, rows, row_bytes, moved);
  count_transfer(e, 0, p, rows, row_bytes, cfg->stride, moved);
  double start = dma_op(e, t, &dur, 1.0);
  e->unit_free[U_LOAD] = start + dur;
  e->st.busy[U_LOAD] += dur;
  double done = start + dur + e->t.dma_latency;
  e->st.dram_bytes_in += (uint64_t)moved;

  /* data */
  int64_t vals[4096];
  if (is_acc(addr) && !is_accumulate(addr) && (zero || cfg->scale == 1.0f)) {
    /* write_row's overwrite of accumulator rows with the values as they are (no scale): copied, not widened to
     * int64 and back */
    for (uint32_t r = 0; r < rows; r++) {
      uint32_t row = row_of(addr) + r;
      int32_t *dst = e->acc + (size_t)row * D;
      const void *src = (const void *)(p + r * cfg->stride);
      if (zero)
        memset(dst, 0, sizeof(int32_t) * D);
      else if (cfg->shrunk)
        widen_row(dst, (const int8_t *)src, cols);
      else
        memcpy(dst, src, sizeof(int32_t) * cols);
      if (!zero && cols < D) memset(dst + cols, 0, sizeof(int32_t) * (D - cols));
      e->acc_written[row] = 1;
    }
    mark_write(e, U_LOAD, addr, rows, done);
  } else if (is_acc(addr)) {
    for (uint32_t r = 0; r < rows; r++) {
      uintptr_t src = p + r * cfg->stride;
      for (uint32_t c = 0; c < cols; c++) {
        if (zero) { vals[c] = 0; continue; }
        int64_t x = cfg->shrunk ? (int64_t)((const int8_t *)src)[c] : (int64_t)((const int32_t *)src)[c];
        vals[c] = cfg->scale == 1.0f ? x : sat32(scale_rne(x, cfg->scale));
      }
      write_row(e, addr, row_of(addr) + r, vals, cols, NO_ACTIVATION, 0, what);
    }
    mark_write(e, U_LOAD, addr, rows, done);
  } else {
    for (uint32_t b = 0; b < nblocks; b++) {
      uint32_t a = addr + b * cfg->block_stride;
      uint32_t bc = (b + 1) * D <= cols ? D : cols - b * D;
      if (zero || cfg->scale == 1.0f) {
        /* write_row's scratchpad row with the bytes as they are (no scale, shift or activation): copied */
        for (uint32_t r = 0; r < rows; r++) {
          uint32_t row = row_of(a) + r;
          int8_t *dst = e->spad + (size_t)row * D;
          if (zero) {
            memset(dst, 0, D);
          } else {
            copy_row(dst, (const int8_t *)(p + r * cfg->stride) + b * D, bc);
            if (bc < D) memset(dst + bc, 0, D - bc);
          }
          e->spad_written[row] = 1;
        }
        mark_write(e, U_LOAD, a, rows, done);
        continue;
      }
      for (uint32_t r = 0; r < rows; r++) {
        const int8_t *src = (const int8_t *)(p + r * cfg->stride) + b * D;
        for (uint32_t c = 0; c < bc; c++) {
          if (zero) { vals[c] = 0; continue; }
          int64_t x = src[c];
          vals[c] = cfg->scale == 1.0f ? x : sat8(scale_rne(x, cfg->scale));
        }
        write_row(e, a, row_of(a) + r, vals, bc, NO_ACTIVATION, 0, what);
      }
      mark_write(e, U_LOAD, a, rows, done);
    }
  }
  if (!zero) watch_read_done(e);
  retire(e, done);
}

static void op_mvout(emu_t *e, void *dram_addr, uint32_t addr, uint32_t cols, uint32_t rows) {
  uint32_t D = e->dim;
  if (is_garbage(addr)) trap(e, "source is the garbage address");
  if (rows == 0 || cols == 0) trap(e, "empty transfer (%u rows x %u cols)", rows, cols);
  if (rows > D) trap(e, "%u rows exceed DIM=%u", rows, D);
  if (cols > D) trap(e, "%u columns exceed DIM=%u", cols, D);
  check_rows(e, addr, rows, 1, "mvout");
  int full = is_acc(addr) && is_full(addr);
  uint64_t row_bytes = (uint64_t)cols * (full ? 4 : 1);
  uintptr_t p = (uintptr_t)dram_addr;
  for (uint32_t r = 0; r < rows; r++) {
    need_written(e, addr, row_of(addr) + r, "mvout");
    check_dram(e, p + r * e->st_stride, row_bytes, 1);
  }

  double t = dispatch_unit(e, U_STORE);
  if (e->unit_free[U_STORE] > t) t = e->unit_free[U_STORE];
  t = wait_read(e, U_STORE, addr, rows, 1, t);
  double dur = dram_cycles(e, rows, row_bytes, (double)rows * row_bytes);
  count_transfer(e, 1, p, rows, row_bytes, e->st_stride, (double)rows * row_bytes);
  double start = dma_op(e, t, &dur, 1.0);
  e->unit_free[U_STORE] = start + dur;
  e->st.busy[U_STORE] += dur;
  double done = start + dur + e->t.dma_latency;
  mark_read(e, addr, rows, 1, start + dur);
  e->st.dram_bytes_out += rows * row_bytes;

  /* The rows reach DRAM at the next fence (release_dma); until then they wait here. */
  uint8_t *out = pend_write(e, OP_MVOUT, p, e->st_stride, row_bytes, rows);
  for (uint32_t r = 0; r < rows; r++) {
    uint32_t row = row_of(addr) + r;
    uint8_t *dst = out + r * row_bytes;
    for (uint32_t c = 0; c < cols; c++) {
      if (!is_acc(addr)) {
        ((int8_t *)dst)[c] = e->spad[(size_t)row * D + c];
      } else if (full) {
        int32_t v = e->acc[(size_t)row * D + c];
        memcpy(dst + 4 * c, &v, 4);
      } else {
        int64_t v = e->acc[(size_t)row * D + c];
        if (e->st_scale != 1.0f) v = scale_rne(v, e->st_scale);
        if (e->st_act == RELU && v < 0) v = 0;
        ((int8_t *)dst)[c] = sat8(v);
      }
    }
  }
  retire(e, done);
}

static void op_preload(emu_t *e, uint32_t BD, uint32_t C, uint32_t BD_cols, uint32_t BD_rows, uint32_t C_cols,
                       uint32_t C_rows) {
  uint32_t D = e->dim;
  if (BD_cols > D || BD_rows > D || C_cols > D || C_rows > D)
    trap(e, "block sizes BD %ux%u C %ux%u exceed DIM=%u", BD_rows, BD_cols, C_rows, C_cols, D);
  if (!is_garbage(C)) {
    if (C_rows == 0 || C_cols == 0) trap(e, "empty output block");
    check_rows(e, C, C_rows, 1, "preload C");
    if (is_full(C)) trap(e, "read-full bit set on an output address");
  }
  if (!is_garbage(BD) && is_acc(BD) && e->dataflow == WEIGHT_STATIONARY)
    trap(e, "weights (B) must come from the scratchpad");

  /* A preload runs in order on the execute unit; one with no operand (garbage BD) only names the output
   * rows of the next compute and costs nothing. */
  double t = dispatch_unit(e, U_EXEC);
  if (e->unit_free[U_EXEC] > t) t = e->unit_free[U_EXEC];
  t = wait_read(e, U_EXEC, BD, BD_rows, 1, t);
  double cost = is_garbage(BD) ? 0.0 : e->t.preload_cycles;
  if (!is_garbage(BD)) {
    e->cf_pre += 1;
    e->cf_any = 1;
  }
  cost = exec_op(e, t, cost);
  double done = t + cost;
  e->unit_free[U_EXEC] = done;
  e->preload_done = done;
  e->st.busy[U_EXEC] += cost;
  mark_read(e, BD, BD_rows, 1, done);

  if (e->dataflow == WEIGHT_STATIONARY) {
    if (!is_garbage(BD)) {
      read_block(e, BD, BD_rows, BD_cols, 1, e->b_tr, e->weights_pending, "preload B");
      e->weights_pending_valid = 1;
      e->weights_pending_cols = e->b_tr ? BD_rows : BD_cols;
    }
  } else {
    read_block(e, BD, BD_rows, BD_cols, 1, 0, e->os_d, "preload D");
  }
  e->preload_pending = 1;
  e->c_addr = C;
  e->c_rows = C_rows;
  e->c_cols = C_cols;
  retire(e, done);
}

static void op_compute(emu_t *e, int op, uint32_t A, uint32_t BD, uint32_t A_cols, uint32_t A_rows, uint32_t BD_cols,
                       uint32_t BD_rows) {
  uint32_t D = e->dim;
  int preloaded = op == OP_COMPUTE_PRELOADED;
  if (!e->preload_pending) trap(e, "compute without a preceding preload");
  if (A_cols > D || A_rows > D || BD_cols > D || BD_rows > D)
    trap(e, "block sizes A %ux%u BD %ux%u exceed DIM=%u", A_rows, A_cols, BD_rows, BD_cols, D);
  uint32_t a_rows_read = e->a_tr ? A_cols : A_rows;
  uint32_t a_cols_read = e->a_tr ? A_rows : A_cols;
  uint32_t C = e->c_addr;

  double t = dispatch_unit(e, U_EXEC);
  if (e->unit_free[U_EXEC] > t) t = e->unit_free[U_EXEC];
  if (e->preload_done > t) t = e->preload_done;
  t = wait_read(e, U_EXEC, A, a_rows_read, e->a_stride, t);
  t = wait_read(e, U_EXEC, BD, BD_rows, 1, t);
  if (!is_garbage(C)) t = wait_write(e, U_EXEC, C, e->c_rows, t);
  double rows_time = e->t.compute_row_cycles * a_rows_read;
  if (rows_time < e->t.compute_floor_cycles) rows_time = e->t.compute_floor_cycles;
  e->cf_ex_rows += rows_time;
  e->cf_ops += 1;
  e->cf_any = 1;
  double dur = exec_op(e, t, e->t.compute_op_cycles + rows_time);
  double end = t + dur;
  double done = end + e->t.compute_latency;
  e->unit_free[U_EXEC] = end;
  e->st.busy[U_EXEC] += dur;
  mark_read(e, A, a_rows_read, e->a_stride, end);
  mark_read(e, BD, BD_rows, 1, end);

  read_block(e, A, a_rows_read, a_cols_read, e->a_stride, e->a_tr, e->blk_a, "compute A");
  const int32_t *W;
  if (e->dataflow == WEIGHT_STATIONARY) {
    if (preloaded) {
      if (e->weights_pending_valid) { /* the preloaded block becomes the array's (read only while valid) */
        int32_t *held = e->weights;
        e->weights = e->weights_pending;
        e->weights_pending = held;
      } else
        memset(e->weights, 0, sizeof(int32_t) * D * D);
      e->weights_cols = e->weights_pending_valid ? e->weights_pending_cols : 0;
      e->weights_pending_valid = 0;
    }
    W = e->weights;
    read_block(e, BD, BD_rows, BD_cols, 1, 0, e->blk_c, "compute D"); /* BD = D, added (into C, the sum) */
  } else {
    read_block(e, BD, BD_rows, BD_cols, 1, e->b_tr, e->blk_b, "compute B");
    W = e->blk_b;
    if (preloaded) memcpy(e->os_state, e->os_d, sizeof(int32_t) * D * D);
    memcpy(e->blk_c, e->os_state, sizeof(int32_t) * D * D);
  }
  mac_block(e->blk_c, e->blk_a, W, D);
  /* useful MACs: the A block times the columns of the operand it meets */
  e->st.macs += (uint64_t)A_rows * A_cols *
                (e->dataflow == WEIGHT_STATIONARY ? e->weights_cols : (e->b_tr ? BD_rows : BD_cols));
  if (e->dataflow == OUTPUT_STATIONARY) memcpy(e->os_state, e->blk_c, sizeof(int32_t) * D * D);

  if (!is_garbage(C)) {
    int64_t vals[256];
    for (uint32_t r = 0; r < e->c_rows; r++) {
      uint32_t row = row_of(C) + r;
      if (is_acc(C) && is_accumulate(C) && e->acc_written[row]) { /* write_row's accumulate, without int64 */
        add_row((uint32_t *)e->acc + (size_t)row * D, (const uint32_t *)e->blk_c + r * D, e->c_cols);
        continue;
      }
      for (uint32_t c = 0; c < e->c_cols; c++) vals[c] = e->blk_c[r * D + c];
      write_row(e, C, row, vals, e->c_cols, e->sys_act, e->sys_shift, OP_NAMES[op]);
    }
    mark_write(e, U_EXEC, C, e->c_rows, done);
  }
  e->preload_pending = 0;
  retire(e, done);
}

/* The fence: waits until every issued instruction has completed; then the CPU may touch what they touched. */
static void op_fence(emu_t *e) {
  double t = dispatch_unit(e, -1);
  if (e->max_complete > t) t = e->max_complete;
  e->t_dispatch = t;
  retire(e, t);
  release_dma(e, 1);
}

static void op_flush(emu_t *e, uint64_t skip) {
  (void)skip; /* TLB flush: no address translation is modelled */
  simple_op(e, U_EXEC, e->t.config_cycles);
}

/* ------------------------------------------------------------------------------------------------ */
/* Decoding: what gemmini.h's macros send (funct7 = k_* code, rs1, rs2 as Gemmini's header packs them) */

static float f32_bits(uint32_t b) {
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

/* rows (63:48), cols (47:32), local address (31:0) */
static uint32_t f_addr(uint64_t r) { return (uint32_t)r; }
static uint32_t f_cols(uint64_t r) { return (uint32_t)(r >> 32) & 0xFFFFu; }
static uint32_t f_rows(uint64_t r) { return (uint32_t)(r >> 48) & 0xFFFFu; }

static void unknown_instruction(emu_t *e, const char *fmt, ...) {
  char buf[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  e->st.instructions++;
  e->cur_op = -1;
  trap(e, "%s", buf);
}

void emu_rocc(uint32_t funct, uint64_t rs1, uint64_t rs2) {
  emu_t *e = cur();
  switch (funct) {
    case k_CONFIG:
      switch (rs1 & 3) {
        case CONFIG_EX: {
          begin(e, OP_CONFIG_EX);
          float acc_scale = f32_bits((uint32_t)(rs1 >> 32));
          uint32_t c_stride = (uint32_t)(rs2 >> 48);
          if (!(acc_scale == acc_scale)) trap(e, "sys_acc_scale is NaN");
          e->ex_acc_scale = acc_scale;
          if (c_stride != 1) trap(e, "C_stride %u: only 1 is modelled", c_stride);
          if ((rs1 >> 7) & 1) trap(e, "set_only_strides is not modelled");
          op_config_ex(e, (int)((rs1 >> 2) & 1), (int)((rs1 >> 3) & 0xF), (int)(int32_t)(uint32_t)rs2,
                       (uint32_t)(rs1 >> 16) & 0xFFFFu, (int)((rs1 >> 8) & 1), (int)((rs1 >> 9) & 1));
          return;
        }
        case CONFIG_LD: {
          begin(e, OP_CONFIG_LD);
          uint32_t repeats = (uint32_t)(rs1 >> 8) & 0xFFu;
          if (repeats != 1) trap(e, "pixel_repeats %u: only 1 is modelled", repeats);
          op_config_ld(e, rs2, f32_bits((uint32_t)(rs1 >> 32)), (int)((rs1 >> 2) & 1),
                       (uint32_t)(rs1 >> 16) & 0xFFFFu, (int)((rs1 >> 3) & 3));
          return;
        }
        case CONFIG_ST:
          begin(e, OP_CONFIG_ST);
          if (rs1 >> 4) trap(e, "pooling / padding fields set (rs1 0x%016llx): not modelled", (unsigned long long)rs1);
          op_config_st(e, (uint32_t)rs2, (int)((rs1 >> 2) & 3), f32_bits((uint32_t)(rs2 >> 32)));
          return;
        default:
          unknown_instruction(e, "config_norm (CONFIG_BERT) is not modelled");
      }
      return;
    case k_MVIN:
    case k_MVIN2:
    case k_MVIN3: {
      int ch = funct == k_MVIN ? 0 : funct == k_MVIN2 ? 1 : 2;
      int op = OP_MVIN + ch;
      begin(e, op);
      op_mvin(e, ch, op, (const void *)(uintptr_t)rs1, f_addr(rs2), f_cols(rs2), f_rows(rs2));
      return;
    }
    case k_MVOUT:
      begin(e, OP_MVOUT);
      op_mvout(e, (void *)(uintptr_t)rs1, f_addr(rs2), f_cols(rs2), f_rows(rs2));
      return;
    case k_PRELOAD:
      begin(e, OP_PRELOAD);
      op_preload(e, f_addr(rs1), f_addr(rs2), f_cols(rs1), f_rows(rs1), f_cols(rs2), f_rows(rs2));
      return;
    case k_COMPUTE_PRELOADED:
    case k_COMPUTE_ACCUMULATE: {
      int op = funct == k_COMPUTE_PRELOADED ? OP_COMPUTE_PRELOADED : OP_COMPUTE_ACCUMULATED;
      begin(e, op);
      op_compute(e, op, f_addr(rs1), f_addr(rs2), f_cols(rs1), f_rows(rs1), f_cols(rs2), f_rows(rs2));
      return;
    }
    case k_FLUSH:
      begin(e, OP_FLUSH);
      op_flush(e, rs1);
      return;
    default:
      unknown_instruction(e, "RoCC funct %u (%s) is not modelled by the emulator", funct,
                          funct >= k_LOOP_WS && funct <= k_LOOP_WS_CONFIG_STRIDES_DC ? "loop_ws"
                          : funct >= k_LOOP_CONV_WS && funct <= k_LOOP_CONV_WS_CONFIG_6 ? "loop_conv_ws"
                          : funct == k_COUNTER ? "counter" : "unknown");
  }
}

void emu_fence(void) {
  emu_t *e = cur();
  begin(e, OP_FENCE);
  op_fence(e);
}


double emu_current_cycles(void) { return g_cur ? model_cycles(g_cur, NULL) : -1.0; }
double emu_cycles_now(const emu_t *e) { return model_cycles(e, NULL); }

/* ------------------------------------------------------------------------------------------------ */
/* Lifecycle and runners                                                                            */

void emu_destroy(emu_t *e);

emu_t *emu_create(uint32_t dim, uint32_t spad_rows, uint32_t acc_rows, uint32_t max_mvin_blocks,
                  const emu_timing_t *timing) {
  if (dim == 0 || dim > 64 || spad_rows == 0 || acc_rows == 0 || max_mvin_blocks == 0 ||
      (uint64_t)dim * max_mvin_blocks > 4096 || spad_rows >= (1u << 29) || acc_rows >= (1u << 29))
    return NULL;
  emu_t *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->dim = dim;
  e->spad_rows = spad_rows;
  e->acc_rows = acc_rows;
  e->max_mvin_blocks = max_mvin_blocks;
  e->t = *timing;
  e->last_call = -1;
  e->page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
  size_t dd = (size_t)dim * dim;
  e->spad = calloc((size_t)spad_rows * dim, 1);
  e->acc = calloc((size_t)acc_rows * dim, sizeof(int32_t));
  e->spad_written = calloc(spad_rows, 1);
  e->acc_written = calloc(acc_rows, 1);
  e->spad_wdone = calloc(spad_rows, sizeof(double));
  e->spad_rdone = calloc(spad_rows, sizeof(double));
  e->acc_wdone = calloc(acc_rows, sizeof(double));
  e->acc_rdone = calloc(acc_rows, sizeof(double));
  e->spad_wunit = calloc(spad_rows, 1);
  e->acc_wunit = calloc(acc_rows, 1);
  e->weights = calloc(dd, sizeof(int32_t));
  e->weights_pending = calloc(dd, sizeof(int32_t));
  e->os_state = calloc(dd, sizeof(int32_t));
  e->os_d = calloc(dd, sizeof(int32_t));
  e->blk_a = calloc(dd, sizeof(int32_t));
  e->blk_b = calloc(dd, sizeof(int32_t));
  e->blk_c = calloc(dd, sizeof(int32_t));
  double qs[3] = {timing->queue_load, timing->queue_exec, timing->queue_store};
  for (int u = 0; u < 3; u++) {
    e->ring_n[u] = qs[u] >= 1 ? (uint32_t)qs[u] : 0;
    e->ring[u] = calloc(e->ring_n[u] ? e->ring_n[u] : 1, sizeof(double));
  }
  if (!e->spad || !e->acc || !e->spad_written || !e->acc_written || !e->spad_wdone || !e->spad_rdone ||
      !e->acc_wdone || !e->acc_rdone || !e->spad_wunit || !e->acc_wunit || !e->weights || !e->weights_pending ||
      !e->os_state || !e->os_d || !e->blk_a || !e->blk_b || !e->blk_c || !e->ring[0] || !e->ring[1] || !e->ring[2]) {
    emu_destroy(e);
    return NULL;
  }
  return e;
}

void emu_destroy(emu_t *e) {
  if (!e) return;
  release_dma(e, 0);
  free(e->pend_in.v); free(e->pend_out.v); free(e->pend_data); free(e->pages);
  free(e->spad); free(e->acc); free(e->spad_written); free(e->acc_written);
  free(e->spad_wdone); free(e->spad_rdone); free(e->acc_wdone); free(e->acc_rdone);
  free(e->spad_wunit); free(e->acc_wunit);
  free(e->weights); free(e->weights_pending); free(e->os_state); free(e->os_d);
  free(e->blk_a); free(e->blk_b); free(e->blk_c);
  free(e->ring[0]); free(e->ring[1]); free(e->ring[2]); free(e->regions);
  free(e->sg); free(e->calls_f); free(e->ct); free(e->fc); free(e->tn); free(e->far_prev); free(e->far_cur);
  for (int r = 0; r < 2; r++) { free(e->iv_start[r]); free(e->iv_end[r]); free(e->iv_cum[r]); free(e->iv_w[r]); }
  free(e);
}

/* Reset all state: memories become unwritten, configuration returns to Gemmini's defaults. */
void emu_reset(emu_t *e) {
  release_dma(e, 0); /* DMA a previous run left un-fenced is void */
  memset(e->spad_written, 0, e->spad_rows);
  memset(e->acc_written, 0, e->acc_rows);
  memset(e->spad, 0, (size_t)e->spad_rows * e->dim);
  memset(e->acc, 0, (size_t)e->acc_rows * e->dim * sizeof(int32_t));
  memset(e->spad_wdone, 0, e->spad_rows * sizeof(double));
  memset(e->spad_rdone, 0, e->spad_rows * sizeof(double));
  memset(e->acc_wdone, 0, e->acc_rows * sizeof(double));
  memset(e->acc_rdone, 0, e->acc_rows * sizeof(double));
  memset(e->spad_wunit, 0, e->spad_rows);
  memset(e->acc_wunit, 0, e->acc_rows);
  for (int u = 0; u < 3; u++) {
    memset(e->ring[u], 0, (e->ring_n[u] ? e->ring_n[u] : 1) * sizeof(double));
    e->unit_count[u] = 0;
  }
  e->cur_unit = -1;
  for (int i = 0; i < 3; i++) {
    e->ld[i].stride = e->dim;
    e->ld[i].scale = 1.0f;
    e->ld[i].shrunk = 0;
    e->ld[i].block_stride = e->dim;
  }
  e->st_stride = e->dim;
  e->st_act = NO_ACTIVATION;
  e->st_scale = 1.0f;
  e->dataflow = WEIGHT_STATIONARY;
  e->sys_act = NO_ACTIVATION;
  e->ex_acc_scale = 1.0f;
  e->sys_shift = 0;
  e->a_stride = 1;
  e->a_tr = e->b_tr = 0;
  e->weights_pending_valid = 0;
  e->weights_cols = e->weights_pending_cols = 0;
  e->preload_pending = 0;
  e->n_regions = 0;
  e->t_dispatch = e->dram_free = e->max_complete = 0;
  e->last_call = -1;
  e->cf_ld_req = e->cf_ld_bytes = e->cf_st_req = e->cf_st_bytes = 0;
  e->cf_ex_rows = e->cf_ops = e->cf_pre = e->cf_dram_req = e->cf_block_req = 0;
  e->cf_any = 0;
  e->sg_n = e->cg_n = 0;
  e->tn_n = 0;
  e->far_prev_n = e->far_cur_n = 0;
  e->calls_n = e->ct_n = 0;
  e->fc_n = 0;
  e->preload_done = 0;
  e->iv_n[0] = e->iv_n[1] = 0;
  e->unit_free[0] = e->unit_free[1] = e->unit_free[2] = 0;
  memset(&e->st, 0, sizeof e->st);
  e->trapped = 0;
  e->trap_index = -1;
  e->trap_op = -1;
  e->trap_msg[0] = 0;
  e->cur_op = -1;
}

int emu_add_region(emu_t *e, void *base, uint64_t size, int writable) {
  if (e->n_regions == e->cap_regions) {
    int cap = e->cap_regions ? 2 * e->cap_regions : 16;
    region_t *r = realloc(e->regions, cap * sizeof *r);
    if (!r) return -1;
    e->regions = r;
    e->cap_regions = cap;
  }
  region_t *r = &e->regions[e->n_regions];
  r->base = (uintptr_t)base;
  r->size = size;
  r->writable = writable;
  /* (plain_rw_memory first: on_my_stack answers for mapped memory) */
  r->guardable = size > 0 && plain_rw_memory(page_of(e, r->base), r->base + size) &&
                 !on_my_stack(page_of(e, r->base), r->base + size);
  return e->n_regions++;
}

int emu_add_tensor(emu_t *e, const void *base, uint64_t size) {
  if (!base || !size) return 0;
  size_t cap = (size_t)e->tn_cap;
  struct tspan *n = grow(e->tn, &cap, (size_t)e->tn_n + 1, sizeof *e->tn);
  if (!n) return -1;
  e->tn = n;
  e->tn_cap = (int)cap;
  e->tn[e->tn_n++] = (struct tspan){(uintptr_t)base, (uintptr_t)base + size, (uintptr_t)base + size, (uintptr_t)base};
  return 0;
}

static void finish(emu_t *e) {
  double end = e->max_complete > e->t_dispatch ? e->max_complete : e->t_dispatch;
  e->st.timeline_cycles = ceil(end + e->t.run_cycles);
  /* (the open call stays open: a host library runs one call as several sessions, tileplan.codegen.host) */
  e->st.cycles = ceil(model_cycles(e, e->st.features) + e->t.run_cycles);
  e->st.calls = e->calls_n + (e->cf_any ? 1 : 0);
}

/* Run a compiled program: entry(args) runs Gemmini instructions (gemmini.h) on e.  Returns 0, or 1 on a trap;
 * after a trap (also one recorded between runs) the session is void until emu_reset: runs return 1 at once. */
int emu_run_entry(emu_t *e, emu_entry_t entry, void **args) {
  if (e->trapped) return 1;
  sigjmp_buf jb;
  emu_t *volatile prev = g_cur;
  g_cur = e;
  e->run_thread = pthread_self();
  e->jb = &jb;
  if (sigsetjmp(jb, 1) == 0) {
    entry(args);
  }
  e->jb = NULL;
  g_cur = prev;
  if (e->trapped) release_dma(e, 0);
  finish(e);
  return e->trapped;
}

int64_t emu_unfenced_mvout(const emu_t *e) { return e->pend_out.n ? e->pend_out.v[0].index : -1; }
void emu_discard_dma(emu_t *e) { release_dma(e, 0); }

/* Run a list of decoded instructions.  DRAM addresses are absolute host addresses. */
int emu_run_list(emu_t *e, const emu_inst_t *ins, uint64_t n) {
  if (e->trapped) return 1;
  sigjmp_buf jb;
  emu_t *volatile prev = g_cur;
  g_cur = e;
  e->run_thread = pthread_self();
  e->jb = &jb;
  if (sigsetjmp(jb, 1) == 0) {
    for (uint64_t i = 0; i < n; i++) {
      const uint64_t *a = ins[i].a;
      int op = ins[i].op;
      if (op < 0 || op >= OP_COUNT) unknown_instruction(e, "unknown opcode %d", op);
      begin(e, op);
      switch (op) {
        case OP_CONFIG_EX:
          if (!(ins[i].f == ins[i].f)) trap(e, "sys_acc_scale is NaN");
          e->ex_acc_scale = (float)ins[i].f;
          op_config_ex(e, (int)a[0], (int)a[1], (int)a[2], (uint32_t)a[3], a[4] != 0, a[5] != 0);
          break;
        case OP_CONFIG_LD: op_config_ld(e, a[0], (float)ins[i].f, a[1] != 0, (uint32_t)a[2], (int)a[3]); break;
        case OP_CONFIG_ST: op_config_st(e, a[0], (int)a[1], (float)ins[i].f); break;
        case OP_MVIN:
        case OP_MVIN2:
        case OP_MVIN3:
          op_mvin(e, op - OP_MVIN, op, (const void *)(uintptr_t)a[0], (uint32_t)a[1], (uint32_t)a[2], (uint32_t)a[3]);
          break;
        case OP_MVOUT: op_mvout(e, (void *)(uintptr_t)a[0], (uint32_t)a[1], (uint32_t)a[2], (uint32_t)a[3]); break;
        case OP_PRELOAD:
          op_preload(e, (uint32_t)a[0], (uint32_t)a[1], (uint32_t)a[2], (uint32_t)a[3], (uint32_t)a[4], (uint32_t)a[5]);
          break;
        case OP_COMPUTE_PRELOADED:
        case OP_COMPUTE_ACCUMULATED:
          op_compute(e, op, (uint32_t)a[0], (uint32_t)a[1], (uint32_t)a[2], (uint32_t)a[3], (uint32_t)a[4],
                     (uint32_t)a[5]);
          break;
        case OP_FENCE: op_fence(e); break;
        case OP_FLUSH: op_flush(e, a[0]); break;
      }
    }
  }
  e->jb = NULL;
  g_cur = prev;
  if (e->trapped) release_dma(e, 0);
  finish(e);
  return e->trapped;
}

void emu_get_stats(const emu_t *e, emu_stats_t *out) { *out = e->st; }
const char *emu_trap_message(const emu_t *e) { return e->trap_msg; }
int64_t emu_trap_index(const emu_t *e) { return e->trap_index; }
int emu_trap_op(const emu_t *e) { return e->trap_op; }
const char *emu_op_name(int op) { return (op >= 0 && op < OP_COUNT) ? OP_NAMES[op] : "?"; }
int emu_op_count(void) { return OP_COUNT; }
