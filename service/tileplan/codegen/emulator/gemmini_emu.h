/*
 * gemmini_emu.h -- the C interface of Tileplan's Gemmini emulator (libgemmini_emu.so, gemmini_emu.c).
 *
 * A program runs Gemmini instructions through gemmini.h (on a host that is not RISC-V its macros call
 * emu_rocc / emu_fence); the emulator runs them while it is the current one: inside emu_run_entry(e, entry,
 * args), which calls entry(args) and turns a trap (an instruction the hardware would not execute correctly, or
 * a CPU access to DRAM that Gemmini's DMA may still be using: see gemmini_emu.c, "Memory ordering") into a
 * non-zero return and emu_trap_message().  Timing and un-fenced DMA persist across emu_run_entry calls until
 * emu_reset, so a session may be split over several entries with CPU code between them; a trap ends the session
 * (later runs return 1 at once) until emu_reset.
 * DRAM buffers a program touches must be registered with emu_add_region first.
 *
 * Tileplan's Python wrapper (tileplan.codegen.emulator) mirrors these structs field for field.
 */
#ifndef TILEPLAN_GEMMINI_EMU_H
#define TILEPLAN_GEMMINI_EMU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMU_OP_COUNT 12 /* config_ex, config_ld, config_st, mvin, mvin2, mvin3, mvout, preload,
                           compute_preloaded, compute_accumulated, fence, flush */

typedef struct {
  double dram_bytes_per_cycle;  /* effective DRAM bandwidth (bytes/cycle)              */
  double dma_request_bytes;     /* longest single DMA request                          */
  double dma_request_cycles;    /* DMA occupancy per request, on top of its bytes      */
  double dma_latency;           /* cycles from the end of a transfer to data available */
  double issue_cycles;          /* per-instruction dispatch cost on the host           */
  double config_cycles;         /* config_ld / config_st / flush in their unit         */
  double call_cycles;           /* config_ex: per-call cost on execute unit and DMA    */
  double preload_cycles;        /* preload of a weight block                           */
  double compute_row_cycles;    /* per row of A streamed through the array             */
  double compute_op_cycles;     /* per compute instruction                             */
  double compute_latency;       /* extra cycles until a compute's results are ready    */
  double overlap_loss;          /* DMA / array contention while both are busy          */
  double queue_load;            /* reservation-station entries (0 = unbounded)         */
  double queue_exec;
  double queue_store;
  double call_floor_cycles;     /* the host issues at most one call per this many cycles */
  double run_cycles;            /* once per program: first-load / last-store latency, fence */
  double compute_floor_cycles;  /* shortest a compute occupies the array, however few rows */
  /* the cost model's terms (tileplan.cost.gemmini) that the per-call timing below adds */
  double dram_request_cycles;   /* extra cycles of a strided-row request on a buffer larger than the L2 */
  double block_wait_cycles;     /* a store request behind an earlier one of its mvout to the same 64-B block */
  double l2_bytes;              /* the SoC's L2: buffers up to this size are refetched from it */
  double llc_miss_cycles;       /* further cycles of such a request when the buffer is larger than the LLC too */
  double llc_bytes;             /* the last-level cache behind the L2 (FireSim's FASED LLC model) */
  double calls_overlap;         /* 1: two calls in flight (double buffered), 0: one at a time */
  double dram_byte_cycles;      /* DRAM's own cycles per byte read from a tensor larger than the LLC */
  double refill_cycles;         /* the memory bus's cycles per 64-B block between the L2 and the LLC / DRAM */
  double call_slots;            /* 1: a call's computes overlap the next call's DMA (loop_conv_ws's two slots) */
} emu_timing_t;

typedef struct {
  double cycles;
  uint64_t instructions;
  uint64_t counts[EMU_OP_COUNT];
  uint64_t dram_bytes_in;
  uint64_t dram_bytes_out;
  uint64_t macs;
  double busy[3]; /* load, execute, store unit busy cycles */
  /* `cycles` is the per-call timing of the calibrated cost model over the instructions this run issued (one
   * Gemmini timing for the emulator and the model); the instruction-level timeline's own end is here: */
  double timeline_cycles;
  uint64_t calls; /* library calls (config_ex) */
  /* the cost model's call features summed over the calls: DMA requests and bytes of loads, of stores, rows the
   * computes streamed (floored), compute instructions, weight preloads, requests that wait on DRAM, store
   * requests that wait behind others to their 64-byte block, requests that wait on DRAM beyond the LLC too,
   * bytes loaded from tensors larger than the LLC that the previous call did not load (emu_add_tensor) */
#define EMU_FEATURES 12
  double features[EMU_FEATURES];
} emu_stats_t;

typedef struct emu emu_t;
typedef void (*emu_entry_t)(void **args);

emu_t *emu_create(uint32_t dim, uint32_t spad_rows, uint32_t acc_rows, uint32_t max_mvin_blocks,
                  const emu_timing_t *timing);
void emu_destroy(emu_t *e);
void emu_reset(emu_t *e);
int emu_add_region(emu_t *e, void *base, uint64_t size, int writable);
/* A tensor within the registered buffers (timing only): loads from one larger than the LLC are read from DRAM at its
 * own rate (tileplan.cost.gemmini: far_bytes).  Cleared by emu_reset. */
int emu_add_tensor(emu_t *e, const void *base, uint64_t size);
int emu_run_entry(emu_t *e, emu_entry_t entry, void **args);
void emu_get_stats(const emu_t *e, emu_stats_t *out);
const char *emu_trap_message(const emu_t *e);
int64_t emu_trap_index(const emu_t *e);
int emu_trap_op(const emu_t *e);
const char *emu_op_name(int op);
int emu_op_count(void);

/* The instructions and the fence (what gemmini.h's macros call; they run on the current emulator). */
void emu_rocc(uint32_t funct, uint64_t rs1, uint64_t rs2);
void emu_fence(void);

/* Emulated cycles so far: the calls issued until now as the cost model times them (see gemmini_emu.c, "Reported
 * cycles"; the once-per-program run_cycles that emu_get_stats' total adds is not included).  emu_current_cycles() is that of the emulator running the caller
 * (for a program between two kernels), -1 outside emu_run_entry. */
double emu_current_cycles(void);
double emu_cycles_now(const emu_t *e);

/* The instruction number of the oldest mvout not yet fenced (its rows have not reached DRAM), or -1. */
int64_t emu_unfenced_mvout(const emu_t *e);
/* Forget un-fenced DMA (its mvout rows never reach DRAM) and stop watching the buffers it touched. */
void emu_discard_dma(emu_t *e);

#ifdef __cplusplus
}
#endif

#endif /* TILEPLAN_GEMMINI_EMU_H */
