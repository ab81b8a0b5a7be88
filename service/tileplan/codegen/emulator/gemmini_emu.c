/*
 * gemmini_emu.c -- functional + instruction-level timing emulator of a Gemmini-like accelerator.
 *
 * Implements the API declared in gemmini.h.  Written for Tileplan from Gemmini's published behaviour
 * (address bits, dataflows, mvin/mvout limits, scaling); no code is taken from Gemmini.
 *
 * Functional model
 *   scratchpad: spad_rows rows of DIM int8; accumulator: acc_rows rows of DIM int32.
 *   Local address bit 31 = accumulator, bit 30 = accumulate on write, bit 29 = read full int32 width,
 *   0xFFFFFFFF = garbage (no operand / discard result).
 *   A non-accumulating write of `cols` < DIM elements zeroes the rest of the row; an accumulating write
 *   touches only its columns.  Reading a row that was never written is a trap, as is accumulating into one.
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
 */
#include "gemmini.h"
#include "gemmini_emu.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  int writable;
} region_t;

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
  int cur_unit;
  double preload_done; /* when the last preload left the execute unit */
  /* busy intervals of the two contended resources (0: DMA channel, 1: array), in time order */
  double *iv_start[2], *iv_end[2], *iv_cum[2], *iv_w[2];
  size_t iv_n[2], iv_cap[2];
  double *ring[3]; /* per unit: completion times of its last queue entries */
  uint32_t ring_n[3];
  uint64_t unit_count[3];

  emu_stats_t st;

  /* traps */
  jmp_buf *jb;
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
  if (e->jb) longjmp(*e->jb, 1);
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
static int is_acc(uint32_t a) { return (a & ACC_ADDR_BIT) != 0; }
static int is_accumulate(uint32_t a) { return (a & ACC_ACCUMULATE_BIT) != 0; }
static int is_full(uint32_t a) { return (a & ACC_READ_FULL_BIT) != 0; }
static uint32_t row_of(uint32_t a) { return a & 0x1FFFFFFFu; }

static void check_rows(emu_t *e, uint32_t addr, uint32_t rows, uint32_t stride, const char *what) {
  uint32_t base = row_of(addr);
  uint32_t limit = is_acc(addr) ? e->acc_rows : e->spad_rows;
  if (!is_acc(addr) && (addr & (ACC_ACCUMULATE_BIT | ACC_READ_FULL_BIT)))
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

/* Busy intervals of the two contended resources (0: DMA channel, 1: array): sorted, disjoint; iv_w = 1 for
 * transfers / array work, 0 for time the resource is merely held (call overhead); iv_cum = weighted busy time
 * before each interval. */
static double busy_before(emu_t *e, int r, double x) {
  size_t n = e->iv_n[r];
  if (!n || x <= e->iv_start[r][0]) return 0.0;
  size_t lo = 0, hi = n; /* last interval with start < x */
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (e->iv_start[r][mid] < x) lo = mid; else hi = mid;
  }
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
  size_t i = 0, hi = n; /* first interval ending after ready */
  while (i < hi) {
    size_t mid = (i + hi) / 2;
    if (e->iv_end[0][mid] <= ready) i = mid + 1; else hi = mid;
  }
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

/* Read an operand block (rows x cols at addr, row stride `stride`) into a DIM x DIM int32 block. */
static void read_block(emu_t *e, uint32_t addr, uint32_t rows, uint32_t cols, uint32_t stride, int transpose,
                       int32_t *blk, const char *what) {
  uint32_t D = e->dim;
  memset(blk, 0, sizeof(int32_t) * D * D);
  if (is_garbage(addr)) return;
  if (rows > D || cols > D) trap(e, "%s block %ux%u exceeds DIM=%u", what, rows, cols, D);
  check_rows(e, addr, rows, stride, what);
  uint32_t b = row_of(addr);
  for (uint32_t r = 0; r < rows; r++) {
    uint32_t row = b + r * stride;
    need_written(e, addr, row, what);
    for (uint32_t c = 0; c < cols; c++) {
      int32_t v = is_acc(addr) ? e->acc[(size_t)row * D + c] : (int32_t)e->spad[(size_t)row * D + c];
      if (transpose)
        blk[c * D + r] = v;
      else
        blk[r * D + c] = v;
    }
  }
}

/* ------------------------------------------------------------------------------------------------ */
/* The API                                                                                          */

void gemmini_extended_config_ex(int dataflow, int sys_act, int sys_shift, uint32_t A_stride, bool A_transpose,
                                bool B_transpose) {
  emu_t *e = cur();
  begin(e, OP_CONFIG_EX);
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

void gemmini_extended_config_ld(uint64_t stride, scale_t scale, bool shrunk, uint32_t block_mvin_stride, int id) {
  emu_t *e = cur();
  begin(e, OP_CONFIG_LD);
  if (id < 0 || id > 2) trap(e, "load channel id %d (must be 0, 1 or 2)", id);
  if (!(scale == scale)) trap(e, "scale is NaN");
  e->ld[id].stride = stride;
  e->ld[id].scale = scale;
  e->ld[id].shrunk = shrunk;
  e->ld[id].block_stride = block_mvin_stride;
  simple_op(e, U_LOAD, e->t.config_cycles);
}

void gemmini_extended_config_st(uint64_t stride, int acc_act, acc_scale_t acc_scale) {
  emu_t *e = cur();
  begin(e, OP_CONFIG_ST);
  if (acc_act != NO_ACTIVATION && acc_act != RELU) trap(e, "unsupported activation %d", acc_act);
  if (!(acc_scale == acc_scale)) trap(e, "scale is NaN");
  e->st_stride = stride;
  e->st_act = acc_act;
  e->st_scale = acc_scale;
  simple_op(e, U_STORE, e->t.config_cycles);
}

static void mvin_impl(int ch, int op, const void *dram_addr, uint32_t addr, uint32_t cols, uint32_t rows) {
  emu_t *e = cur();
  begin(e, op);
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
  if (!zero)
    for (uint32_t r = 0; r < rows; r++) check_dram(e, p + r * cfg->stride, row_bytes, 0);

  /* timing */
  double t = dispatch_unit(e, U_LOAD);
  if (e->unit_free[U_LOAD] > t) t = e->unit_free[U_LOAD];
  for (uint32_t b = 0; b < nblocks; b++) {
    uint32_t a = is_acc(addr) ? addr : addr + b * cfg->block_stride;
    t = wait_write(e, U_LOAD, a, rows, t);
  }
  double moved = zero ? 0.0 : (cfg->stride == 0 ? (double)row_bytes : (double)rows * row_bytes);
  double dur = dram_cycles(e, rows, row_bytes, moved);
  double start = dma_op(e, t, &dur, 1.0);
  e->unit_free[U_LOAD] = start + dur;
  e->st.busy[U_LOAD] += dur;
  double done = start + dur + e->t.dma_latency;
  e->st.dram_bytes_in += (uint64_t)moved;

  /* data */
  int64_t vals[4096];
  if (is_acc(addr)) {
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
  retire(e, done);
}

void gemmini_extended_mvin(const void *dram_addr, uint32_t spad_addr, uint32_t cols, uint32_t rows) {
  mvin_impl(0, OP_MVIN, dram_addr, spad_addr, cols, rows);
}
void gemmini_extended_mvin2(const void *dram_addr, uint32_t spad_addr, uint32_t cols, uint32_t rows) {
  mvin_impl(1, OP_MVIN2, dram_addr, spad_addr, cols, rows);
}
void gemmini_extended_mvin3(const void *dram_addr, uint32_t spad_addr, uint32_t cols, uint32_t rows) {
  mvin_impl(2, OP_MVIN3, dram_addr, spad_addr, cols, rows);
}

void gemmini_extended_mvout(void *dram_addr, uint32_t addr, uint32_t cols, uint32_t rows) {
  emu_t *e = cur();
  begin(e, OP_MVOUT);
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
  double start = dma_op(e, t, &dur, 1.0);
  e->unit_free[U_STORE] = start + dur;
  e->st.busy[U_STORE] += dur;
  double done = start + dur + e->t.dma_latency;
  mark_read(e, addr, rows, 1, start + dur);
  e->st.dram_bytes_out += rows * row_bytes;

  for (uint32_t r = 0; r < rows; r++) {
    uint32_t row = row_of(addr) + r;
    uintptr_t dst = p + r * e->st_stride;
    for (uint32_t c = 0; c < cols; c++) {
      if (!is_acc(addr)) {
        ((int8_t *)dst)[c] = e->spad[(size_t)row * D + c];
      } else if (full) {
        ((int32_t *)dst)[c] = e->acc[(size_t)row * D + c];
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

void gemmini_extended_preload(uint32_t BD, uint32_t C, uint32_t BD_cols, uint32_t BD_rows, uint32_t C_cols,
                              uint32_t C_rows) {
  emu_t *e = cur();
  begin(e, OP_PRELOAD);
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

static void compute_impl(int op, uint32_t A, uint32_t BD, uint32_t A_cols, uint32_t A_rows, uint32_t BD_cols,
                         uint32_t BD_rows) {
  emu_t *e = cur();
  begin(e, op);
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
  double dur = exec_op(e, t, e->t.compute_op_cycles + e->t.compute_row_cycles * a_rows_read);
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
      if (e->weights_pending_valid)
        memcpy(e->weights, e->weights_pending, sizeof(int32_t) * D * D);
      else
        memset(e->weights, 0, sizeof(int32_t) * D * D);
      e->weights_cols = e->weights_pending_valid ? e->weights_pending_cols : 0;
      e->weights_pending_valid = 0;
    }
    W = e->weights;
    read_block(e, BD, BD_rows, BD_cols, 1, 0, e->blk_b, "compute D"); /* BD = D, added */
    for (uint32_t i = 0; i < D * D; i++) e->blk_c[i] = e->blk_b[i];
  } else {
    read_block(e, BD, BD_rows, BD_cols, 1, e->b_tr, e->blk_b, "compute B");
    W = e->blk_b;
    if (preloaded) memcpy(e->os_state, e->os_d, sizeof(int32_t) * D * D);
    for (uint32_t i = 0; i < D * D; i++) e->blk_c[i] = e->os_state[i];
  }
  for (uint32_t i = 0; i < D; i++) {
    const int32_t *ar = e->blk_a + i * D;
    int32_t *cr = e->blk_c + i * D;
    for (uint32_t k = 0; k < D; k++) {
      int32_t av = ar[k];
      if (!av) continue;
      const int32_t *wr = W + k * D;
      for (uint32_t j = 0; j < D; j++) cr[j] = wrap_add(cr[j], av * wr[j]);
    }
  }
  /* useful MACs: the A block times the columns of the operand it meets */
  e->st.macs += (uint64_t)A_rows * A_cols *
                (e->dataflow == WEIGHT_STATIONARY ? e->weights_cols : (e->b_tr ? BD_rows : BD_cols));
  if (e->dataflow == OUTPUT_STATIONARY) memcpy(e->os_state, e->blk_c, sizeof(int32_t) * D * D);

  if (!is_garbage(C)) {
    int64_t vals[256];
    for (uint32_t r = 0; r < e->c_rows; r++) {
      for (uint32_t c = 0; c < e->c_cols; c++) vals[c] = e->blk_c[r * D + c];
      write_row(e, C, row_of(C) + r, vals, e->c_cols, e->sys_act, e->sys_shift, OP_NAMES[op]);
    }
    mark_write(e, U_EXEC, C, e->c_rows, done);
  }
  e->preload_pending = 0;
  retire(e, done);
}

void gemmini_extended_compute_preloaded(uint32_t A, uint32_t BD, uint32_t A_cols, uint32_t A_rows, uint32_t BD_cols,
                                        uint32_t BD_rows) {
  compute_impl(OP_COMPUTE_PRELOADED, A, BD, A_cols, A_rows, BD_cols, BD_rows);
}
void gemmini_extended_compute_accumulated(uint32_t A, uint32_t BD, uint32_t A_cols, uint32_t A_rows,
                                          uint32_t BD_cols, uint32_t BD_rows) {
  compute_impl(OP_COMPUTE_ACCUMULATED, A, BD, A_cols, A_rows, BD_cols, BD_rows);
}

void gemmini_fence(void) {
  emu_t *e = cur();
  begin(e, OP_FENCE);
  double t = dispatch_unit(e, -1);
  if (e->max_complete > t) t = e->max_complete;
  e->t_dispatch = t;
  retire(e, t);
}

void gemmini_flush(int skip) {
  emu_t *e = cur();
  begin(e, OP_FLUSH);
  (void)skip; /* TLB flush: no address translation is modelled */
  simple_op(e, U_EXEC, e->t.config_cycles);
}

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
  free(e->spad); free(e->acc); free(e->spad_written); free(e->acc_written);
  free(e->spad_wdone); free(e->spad_rdone); free(e->acc_wdone); free(e->acc_rdone);
  free(e->spad_wunit); free(e->acc_wunit);
  free(e->weights); free(e->weights_pending); free(e->os_state); free(e->os_d);
  free(e->blk_a); free(e->blk_b); free(e->blk_c);
  free(e->ring[0]); free(e->ring[1]); free(e->ring[2]); free(e->regions);
  for (int r = 0; r < 2; r++) { free(e->iv_start[r]); free(e->iv_end[r]); free(e->iv_cum[r]); free(e->iv_w[r]); }
  free(e);
}

/* Reset all state: memories become unwritten, configuration returns to Gemmini's defaults. */
void emu_reset(emu_t *e) {
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
  e->sys_shift = 0;
  e->a_stride = 1;
  e->a_tr = e->b_tr = 0;
  e->weights_pending_valid = 0;
  e->weights_cols = e->weights_pending_cols = 0;
  e->preload_pending = 0;
  e->n_regions = 0;
  e->t_dispatch = e->dram_free = e->max_complete = 0;
  e->last_call = -1;
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
  e->regions[e->n_regions].base = (uintptr_t)base;
  e->regions[e->n_regions].size = size;
  e->regions[e->n_regions].writable = writable;
  return e->n_regions++;
}

static void finish(emu_t *e) {
  double end = e->max_complete > e->t_dispatch ? e->max_complete : e->t_dispatch;
  e->st.cycles = ceil(end + e->t.run_cycles);
}

/* Run a compiled program: entry(args) calls the gemmini_* API.  Returns 0, or 1 on a trap. */
int emu_run_entry(emu_t *e, emu_entry_t entry, void **args) {
  jmp_buf jb;
  emu_t *volatile prev = g_cur;
  g_cur = e;
  e->jb = &jb;
  if (setjmp(jb) == 0) {
    entry(args);
  }
  e->jb = NULL;
  g_cur = prev;
  finish(e);
  return e->trapped;
}

/* Run a list of decoded instructions.  DRAM addresses are absolute host addresses. */
int emu_run_list(emu_t *e, const emu_inst_t *ins, uint64_t n) {
  jmp_buf jb;
  emu_t *volatile prev = g_cur;
  g_cur = e;
  e->jb = &jb;
  if (setjmp(jb) == 0) {
    for (uint64_t i = 0; i < n; i++) {
      const uint64_t *a = ins[i].a;
      switch (ins[i].op) {
        case OP_CONFIG_EX:
          gemmini_extended_config_ex((int)a[0], (int)a[1], (int)a[2], (uint32_t)a[3], a[4] != 0, a[5] != 0);
          break;
        case OP_CONFIG_LD:
          gemmini_extended_config_ld(a[0], (float)ins[i].f, a[1] != 0, (uint32_t)a[2], (int)a[3]);
          break;
        case OP_CONFIG_ST: gemmini_extended_config_st(a[0], (int)a[1], (float)ins[i].f); break;
        case OP_MVIN: gemmini_extended_mvin((const void *)(uintptr_t)a[0], (uint32_t)a[1], (uint32_t)a[2], (uint32_t)a[3]); break;
        case OP_MVIN2: gemmini_extended_mvin2((const void *)(uintptr_t)a[0], (uint32_t)a[1], (uint32_t)a[2], (uint32_t)a[3]); break;
        case OP_MVIN3: gemmini_extended_mvin3((const void *)(uintptr_t)a[0], (uint32_t)a[1], (uint32_t)a[2], (uint32_t)a[3]); break;
        case OP_MVOUT: gemmini_extended_mvout((void *)(uintptr_t)a[0], (uint32_t)a[1], (uint32_t)a[2], (uint32_t)a[3]); break;
        case OP_PRELOAD:
          gemmini_extended_preload((uint32_t)a[0], (uint32_t)a[1], (uint32_t)a[2], (uint32_t)a[3], (uint32_t)a[4], (uint32_t)a[5]);
          break;
        case OP_COMPUTE_PRELOADED:
          gemmini_extended_compute_preloaded((uint32_t)a[0], (uint32_t)a[1], (uint32_t)a[2], (uint32_t)a[3], (uint32_t)a[4], (uint32_t)a[5]);
          break;
        case OP_COMPUTE_ACCUMULATED:
          gemmini_extended_compute_accumulated((uint32_t)a[0], (uint32_t)a[1], (uint32_t)a[2], (uint32_t)a[3], (uint32_t)a[4], (uint32_t)a[5]);
          break;
        case OP_FENCE: gemmini_fence(); break;
        case OP_FLUSH: gemmini_flush((int)a[0]); break;
        default:
          e->st.instructions++;
          e->cur_op = -1;
          trap(e, "unknown opcode %d", ins[i].op);
      }
    }
  }
  e->jb = NULL;
  g_cur = prev;
  finish(e);
  return e->trapped;
}

void emu_get_stats(const emu_t *e, emu_stats_t *out) { *out = e->st; }
const char *emu_trap_message(const emu_t *e) { return e->trap_msg; }
int64_t emu_trap_index(const emu_t *e) { return e->trap_index; }
int emu_trap_op(const emu_t *e) { return e->trap_op; }
const char *emu_op_name(int op) { return (op >= 0 && op < OP_COUNT) ? OP_NAMES[op] : "?"; }
int emu_op_count(void) { return OP_COUNT; }
